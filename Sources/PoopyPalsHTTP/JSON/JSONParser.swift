/// The API's JSON reader: RFC 8259 as written, and a key given twice in one object refused. Parsers disagree on
/// which of two equal keys wins (Foundation keeps one, many proxies and WAFs the last), so a body that says two
/// things is refused rather than guessed at.
///
/// Strict: no comments, trailing commas, `NaN`, leading zeros, unescaped control characters, lone surrogates or
/// invalid UTF-8; nesting deeper than 512 (Foundation's limit) is refused, so no input can exhaust the stack. It
/// replaced Foundation's `JSONDecoder` into `JSONValue` (which tried each kind in turn and threw on every miss:
/// 13 % of a `POST /v1/logs`'s instructions) and a second pass looking for repeated keys.
struct JSONParser {
    enum Failure: Error, Equatable {
        case invalid
        case duplicateKey(String)
    }

    static let maximumDepth = 512

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// One JSON value, surrounded by nothing but whitespace.
    static func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws(Failure) -> JSONValue {
        var parser = JSONParser(bytes)
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw .invalid }
        return value
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0a, 0x0d: index += 1
            default: return
            }
        }
    }

    private mutating func value(depth: Int) throws(Failure) -> JSONValue {
        skipWhitespace()
        guard let byte = current else { throw .invalid }
        switch byte {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw .invalid
        }
    }

    private mutating func literal(_ word: StaticString) throws(Failure) {
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw .invalid }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { throw .invalid }
        index += count
    }

    private mutating func object(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw .invalid }
        index += 1  // {
        var object: [String: JSONValue] = [:]
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            index += 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw .invalid }
            let key = try string()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw .invalid }
            index += 1
            let value = try value(depth: depth)
            guard object.updateValue(value, forKey: key) == nil else { throw .duplicateKey(key) }
            skipWhitespace()
            switch current {
            case UInt8(ascii: ",")?: index += 1
            case UInt8(ascii: "}")?: index += 1; return .object(object)
            default: throw .invalid
            }
        }
    }

    private mutating func array(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw .invalid }
        index += 1  // [
        var items: [JSONValue] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            items.append(try value(depth: depth))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ",")?: index += 1
            case UInt8(ascii: "]")?: index += 1; return .array(items)
            default: throw .invalid
            }
        }
    }

    /// A string from its opening quote; escapes resolved, UTF-8 checked.
    private mutating func string() throws(Failure) -> String {
        index += 1  // "
        let start = index
        // Most strings (keys, ids, timestamps) hold no escape: one scan, one validation, no copy to a buffer.
        while index < bytes.count, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\") {
            guard bytes[index] >= 0x20 else { throw .invalid }
            index += 1
        }
        guard index < bytes.count else { throw .invalid }
        if bytes[index] == UInt8(ascii: "\"") {
            defer { index += 1 }
            return try Self.text(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        }
        var decoded = Array(bytes[start..<index])
        while true {
            guard index < bytes.count else { throw .invalid }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return try decoded.withUnsafeBufferPointer { buffer throws(Failure) in try Self.text(buffer) }
            case UInt8(ascii: "\\"):
                index += 1
                guard let escape = current else { throw .invalid }
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0c)
                case UInt8(ascii: "n"): decoded.append(0x0a)
                case UInt8(ascii: "r"): decoded.append(0x0d)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"): Self.append(try unicodeEscape(), to: &decoded)
                default: throw .invalid
                }
            case 0x00..<0x20:
                throw .invalid
            default:
                decoded.append(byte)
                index += 1
            }
        }
    }

    /// After `\u`: four hex digits, and for a high surrogate the `\uXXXX` of its low one.
    private mutating func unicodeEscape() throws(Failure) -> Unicode.Scalar {
        let first = try hex4()
        switch first {
        case 0xd800...0xdbff:
            guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else { throw .invalid }
            index += 2
            let second = try hex4()
            guard (0xdc00...0xdfff).contains(second) else { throw .invalid }
            let value = 0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
            guard let scalar = Unicode.Scalar(value) else { throw .invalid }
            return scalar
        case 0xdc00...0xdfff:
            throw .invalid
        default:
            guard let scalar = Unicode.Scalar(first) else { throw .invalid }
            return scalar
        }
    }

    private mutating func hex4() throws(Failure) -> UInt32 {
        guard bytes.count - index >= 4 else { throw .invalid }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw .invalid
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private static func append(_ scalar: Unicode.Scalar, to bytes: inout [UInt8]) {
        if let encoded = UTF8.encode(scalar) { bytes.append(contentsOf: encoded) }
    }

    private static func text(_ bytes: UnsafeBufferPointer<UInt8>) throws(Failure) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .invalid }
        return text
    }

    /// `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`, read as the nearest double; one too large for a double
    /// is refused (Foundation refuses it too).
    private mutating func number() throws(Failure) -> Double {
        let start = index
        func digits() -> Int {
            let first = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - first
        }
        if current == UInt8(ascii: "-") { index += 1 }
        if current == UInt8(ascii: "0") {
            index += 1
        } else {
            guard digits() > 0 else { throw .invalid }
        }
        if current == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw .invalid }
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            index += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw .invalid }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw .invalid }
        return value
    }
}
