/// Splits a SQL file into statements the way PostgreSQL's lexer sees them: semicolons inside quotes,
/// quoted identifiers, dollar-quoted bodies, comments (nested block comments too) and `BEGIN ATOMIC … END`
/// function bodies do not end a statement.
public struct SQLScript: Sendable {
    public struct Statement: Sendable, Equatable {
        /// The text sent to the server, exactly as in the file (leading comments included).
        public let text: String
        /// Unicode-scalar offset of `text` in the file.
        public let offset: Int
        /// 1-based line of the statement's first token.
        public let line: Int
        /// The first keyword, upper-cased (`CREATE`, `BEGIN`, …).
        public let keyword: String
        /// The statement from its first token on (leading comments dropped).
        public let code: String
    }

    public let statements: [Statement]
    private let lineStarts: [Int]

    public init(_ source: String) {
        let scalars = Array(source.unicodeScalars)
        var lineStarts = [0]
        for (index, scalar) in scalars.enumerated() where scalar == "\n" { lineStarts.append(index + 1) }
        self.lineStarts = lineStarts
        statements = Self.split(scalars, lineStarts: lineStarts)
    }

    /// 1-based line and column of a scalar offset in the file.
    public func location(ofOffset offset: Int) -> (line: Int, column: Int) {
        var low = 0
        var high = lineStarts.count - 1
        while low < high {
            let mid = (low + high + 1) / 2
            if lineStarts[mid] <= offset { low = mid } else { high = mid - 1 }
        }
        return (low + 1, offset - lineStarts[low] + 1)
    }

    private static func split(_ s: [Unicode.Scalar], lineStarts: [Int]) -> [Statement] {
        var statements: [Statement] = []
        var start = 0
        var firstToken: Int?
        var firstWord = ""
        var previousWord = ""
        var atomicDepth = 0
        var i = 0
        let n = s.count

        func isIdentifierStart(_ c: Unicode.Scalar) -> Bool { c == "_" || c.properties.isAlphabetic }
        func isIdentifierPart(_ c: Unicode.Scalar) -> Bool { isIdentifierStart(c) || c == "$" || ("0"..."9").contains(c) }
        func emit(upTo end: Int) {
            if let first = firstToken {
                let text = String(String.UnicodeScalarView(s[start..<end]))
                let line = lineStarts.lastIndex(where: { $0 <= first }).map { $0 + 1 } ?? 1
                let code = String(String.UnicodeScalarView(s[first..<end]))
                statements.append(Statement(text: text, offset: start, line: line, keyword: firstWord, code: code))
            }
            start = end + 1
            firstToken = nil
            firstWord = ""
            previousWord = ""
        }

        while i < n {
            let c = s[i]
            let next: Unicode.Scalar? = i + 1 < n ? s[i + 1] : nil
            if c == "-" && next == "-" {
                while i < n && s[i] != "\n" { i += 1 }
                continue
            }
            if c == "/" && next == "*" {
                var depth = 0
                repeat {
                    if s[i] == "/", i + 1 < n, s[i + 1] == "*" { depth += 1; i += 2 }
                    else if s[i] == "*", i + 1 < n, s[i + 1] == "/" { depth -= 1; i += 2 }
                    else { i += 1 }
                } while i < n && depth > 0
                continue
            }
            if c.properties.isWhitespace { i += 1; continue }
            if c == ";" && atomicDepth == 0 {
                emit(upTo: i)
                i += 1
                continue
            }
            if firstToken == nil { firstToken = i }
            if c == "'" {
                let escapes = i > 0 && (s[i - 1] == "E" || s[i - 1] == "e") && (i < 2 || !isIdentifierPart(s[i - 2]))
                i += 1
                while i < n {
                    if escapes && s[i] == "\\" { i += 2; continue }
                    if s[i] == "'" {
                        if i + 1 < n && s[i + 1] == "'" { i += 2; continue }
                        break
                    }
                    i += 1
                }
                i += 1
                continue
            }
            if c == "\"" {
                i += 1
                while i < n {
                    if s[i] == "\"" {
                        if i + 1 < n && s[i + 1] == "\"" { i += 2; continue }
                        break
                    }
                    i += 1
                }
                i += 1
                continue
            }
            if c == "$", i == 0 || !isIdentifierPart(s[i - 1]) {
                // A dollar quote: $$ or $tag$ (a tag never starts with a digit; $1 is a parameter).
                var j = i + 1
                while j < n, s[j] != "$", isIdentifierPart(s[j]) { j += 1 }
                if j < n, s[j] == "$", j == i + 1 || !("0"..."9").contains(s[i + 1]) {
                    let tag = Array(s[i...j])
                    var k = j + 1
                    while k + tag.count <= n, Array(s[k..<(k + tag.count)]) != tag { k += 1 }
                    i = min(n, k + tag.count)
                    continue
                }
            }
            if isIdentifierStart(c) {
                var j = i
                while j < n, isIdentifierPart(s[j]) { j += 1 }
                let word = String(String.UnicodeScalarView(s[i..<j])).uppercased()
                if firstWord.isEmpty { firstWord = word }
                if word == "ATOMIC" && previousWord == "BEGIN" { atomicDepth += 1 }
                else if atomicDepth > 0 && word == "CASE" { atomicDepth += 1 }
                else if atomicDepth > 0 && word == "END" { atomicDepth -= 1 }
                previousWord = word
                i = j
                continue
            }
            i += 1
        }
        emit(upTo: n)
        return statements
    }
}
