/// Does a statement leave state in the session, beyond its transaction, that the next borrower of a pooled
/// connection would inherit? A `SET` (not `SET LOCAL`), `set_config(…, false)`, a session advisory lock, a
/// temporary table, `LISTEN`, a cursor `WITH HOLD`, a `PREPARE`.
///
/// A lexical check, cached with the statement: cheap enough for every new SQL text, and it errs towards
/// "dirty" (a dirty connection costs one extra round trip when it is returned; a missed one would leak state).
/// It cannot see inside functions: a function that changes session settings must be called through a
/// connection the caller resets itself.
enum SessionState {
    static func mayPersist(_ sql: String) -> Bool {
        let text = sql.lowercased()
        for marker in ["pg_advisory_lock", "pg_try_advisory_lock", "temp", "with hold"] where text.contains(marker) {
            return true
        }
        // Our own transaction-local settings are the common case: set_config(…, true) only.
        if text.contains("set_config"), !isTransactionLocalSetConfigOnly(text) { return true }
        for statement in text.split(separator: ";") {
            let words = statement.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" })
            guard let first = words.first else { continue }
            switch first {
            case "set":
                let second = words.dropFirst().first ?? ""
                if !["local", "transaction", "constraints"].contains(second) { return true }
            case "reset", "listen", "prepare", "load", "discard":
                return true
            default:
                continue
            }
        }
        return false
    }

    /// `set_config(name, value, true)` with literal `true` as every call's last argument. An argument may hold
    /// parentheses (a function call: `poopypals_service_role()`) and quoted text: arguments are split at the
    /// call's own commas only.
    private static func isTransactionLocalSetConfigOnly(_ text: String) -> Bool {
        var rest = Substring(text)
        while let range = rest.range(of: "set_config(") {
            rest = rest[range.upperBound...]
            var arguments: [Substring] = []
            var (depth, quoted, start, close) = (0, false, rest.startIndex, rest.endIndex)
            scan: for index in rest.indices {
                switch rest[index] {
                case "'": quoted.toggle()
                case "(" where !quoted: depth += 1
                case ")" where !quoted && depth > 0: depth -= 1
                case ")" where !quoted:
                    close = index
                    break scan
                case "," where !quoted && depth == 0:
                    arguments.append(rest[start..<index])
                    start = rest.index(after: index)
                default: continue
                }
            }
            guard close < rest.endIndex else { return false }
            arguments.append(rest[start..<close])
            guard arguments.count == 3, arguments[2].filter({ !$0.isWhitespace }) == "true" else { return false }
            rest = rest[close...]
        }
        return true
    }
}
