/// A statement with its bound values.
///
/// Built with string interpolation, every `\(value)` becomes a bound parameter (`$1`, `$2`, …); a name that
/// cannot be bound is spelled `\(identifier: name)` (quoted); other raw SQL must be spelled `\(unescaped: "…")`,
/// so that it stands out in review. `Connection.executeScript` runs constant SQL only (no values: it sends the
/// simple protocol, for statements that cannot be prepared or several at once):
///
///     let query: PostgresQuery = "SELECT id FROM users WHERE email = \(email)"
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    /// The SQL text with `$n` placeholders.
    public private(set) var sql: String
    /// Values in text format; `nil` is SQL NULL.
    public private(set) var binds: [String?]
    /// The first value that could not be encoded; thrown when the query is run, before anything is sent.
    private(set) var bindError: PostgresClientError?
    /// Asks the server for every column in binary format: no text to print on the server nor to parse here (a
    /// timestamp is 8 bytes, a UUID 16). Only for results whose every column's type has a binary decoder
    /// (`PostgresDecodable.decode(postgresBinary:type:)`): text, integers, booleans, UUIDs, timestamps, dates,
    /// floats. Any other column fails to decode, clearly.
    public var binaryResults = false
    /// Sent as the unnamed statement, parsed for this execution only, and never kept in the connection's statement
    /// cache: for SQL whose text changes with every call (a validated literal in a statement that takes no
    /// parameter, such as `SET LOCAL`), which would otherwise fill the cache and evict the statements worth keeping.
    public var oneOff = false

    /// SQL with values bound by position. `sql` must not contain values spliced in by hand.
    public init(unsafeSQL sql: String, binds: [any PostgresEncodable] = []) {
        self.sql = sql
        self.binds = []
        // Grown one value at a time, the array was copied four times for five values (3 k instructions).
        self.binds.reserveCapacity(binds.count)
        for value in binds { bind(value) }
    }

    /// SQL with values bound by position, given in text form (`nil` is SQL NULL): for a statement run on every
    /// request whose values are all text already, with no existential box and dynamic call per value.
    public init(unsafeSQL sql: String, textBinds: [String?]) {
        self.sql = sql
        binds = []
        binds.reserveCapacity(textBinds.count)
        // Checked as any text parameter is (a NUL would cut the value short).
        for value in textBinds { bind(value) }
    }

    public init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    public init(stringInterpolation: StringInterpolation) {
        self = stringInterpolation.query
        sql = String(decoding: stringInterpolation.text, as: UTF8.self)
    }

    private mutating func bind(_ value: some PostgresEncodable) {
        do {
            binds.append(try value.postgresText())
        } catch let error as PostgresClientError {
            binds.append(nil)
            if bindError == nil {
                bindError = PostgresClientError(error.kind, "parameter $\(binds.count): \(error.message)")
            }
        } catch {
            binds.append(nil)
            if bindError == nil { bindError = PostgresClientError(.invalidParameter, "parameter $\(binds.count): \(error)") }
        }
    }

    /// The SQL text only: bound values are never printed.
    public var description: String { sql }

    /// This query with `oneOff` set.
    public func asOneOff() -> PostgresQuery {
        var query = self
        query.oneOff = true
        return query
    }

    /// This query with `binaryResults` set.
    public func withBinaryResults() -> PostgresQuery {
        var query = self
        query.binaryResults = true
        return query
    }

    /// Builds the SQL text as UTF-8 bytes, made a `String` once at the end: appending each literal and placeholder
    /// to a `String` cost about 340 instructions an append, 9.4 k for the ensureProfile statement's 13 pieces, on
    /// every request (callgrind, `--profile-scenario`).
    public struct StringInterpolation: StringInterpolationProtocol {
        fileprivate var query = PostgresQuery(unsafeSQL: "")
        fileprivate var text: [UInt8] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + interpolationCount * 3)
            query.binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) {
            append(literal)
        }

        private mutating func append(_ piece: String) {
            // A literal's UTF-8 is contiguous: copied at once. Any other string byte by byte.
            if piece.utf8.withContiguousStorageIfAvailable({ text.append(contentsOf: $0) }) == nil {
                text.append(contentsOf: piece.utf8)
            }
        }

        /// Binds `value` as the next parameter.
        public mutating func appendInterpolation(_ value: some PostgresEncodable) {
            query.bind(value)
            appendPlaceholder()
        }

        /// Binds `value` as the next parameter, or NULL when it is nil.
        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value?) {
            // Unwrapped here: binding the Optional itself looked up `Optional<Value>`'s metadata on every call.
            if let value {
                query.bind(value)
            } else {
                query.binds.append(nil)
            }
            appendPlaceholder()
        }

        /// `$n` for the parameter just bound, written as digits: no String formatted for it.
        private mutating func appendPlaceholder() {
            text.append(UInt8(ascii: "$"))
            let number = query.binds.count
            if number < 10 {
                text.append(UInt8(ascii: "0") + UInt8(truncatingIfNeeded: number))
            } else if number < 100 {
                text.append(UInt8(ascii: "0") + UInt8(truncatingIfNeeded: number / 10))
                text.append(UInt8(ascii: "0") + UInt8(truncatingIfNeeded: number % 10))
            } else {
                append(String(number))
            }
        }

        /// Splices raw SQL text in. Never pass anything that came from outside the program.
        public mutating func appendInterpolation(unescaped sql: String) {
            append(sql)
        }

        /// Splices a name in as a quoted identifier (`PostgresIdentifier.quoted`): the one way a table, column or
        /// role name that is not a constant enters SQL (names cannot be bound).
        public mutating func appendInterpolation(identifier name: String) {
            append(PostgresIdentifier.quoted(name))
        }
    }
}
