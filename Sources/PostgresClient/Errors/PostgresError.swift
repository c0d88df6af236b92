/// An error reported by the PostgreSQL server, with every diagnostic field libpq gives.
///
/// `description` is safe for logs: it never contains bound values, and for data exceptions (class 22),
/// whose message quotes the offending input, the quoted input is elided. `detail` is left out of
/// `description` because it carries row values (`Key (email)=(…) already exists`); `debugDescription` shows it.
public struct PostgresError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    public let sqlState: SQLState
    /// `ERROR`, `FATAL` or `PANIC` (not localized).
    public let severity: String
    public let message: String
    public let detail: String?
    public let hint: String?
    public let schema: String?
    public let table: String?
    public let column: String?
    public let dataType: String?
    public let constraint: String?
    /// 1-based character offset of the error in the statement text, when the server gives one.
    public let position: Int?

    public init(
        sqlState: SQLState, severity: String = "ERROR", message: String, detail: String? = nil,
        hint: String? = nil, schema: String? = nil, table: String? = nil, column: String? = nil,
        dataType: String? = nil, constraint: String? = nil, position: Int? = nil
    ) {
        self.sqlState = sqlState
        self.severity = severity
        self.message = message
        self.detail = detail
        self.hint = hint
        self.schema = schema
        self.table = table
        self.column = column
        self.dataType = dataType
        self.constraint = constraint
        self.position = position
    }

    /// The message with any quoted input value elided, for data exceptions.
    public var safeMessage: String {
        guard sqlState.errorClass == .dataException,
              let first = message.firstIndex(of: "\""), let last = message.lastIndex(of: "\""), first < last
        else { return message }
        return message[...first] + "…" + message[last...]
    }

    public var description: String {
        var text = "\(severity) \(sqlState): \(safeMessage)"
        let context = [("table", table), ("column", column), ("constraint", constraint)]
            .compactMap { label, value in value.map { "\(label) \($0)" } }
        if !context.isEmpty { text += " (\(context.joined(separator: ", ")))" }
        if let hint { text += ". Hint: \(hint)" }
        return text
    }

    public var debugDescription: String {
        var text = "\(severity) \(sqlState): \(message)"
        if let detail { text += "\nDETAIL: \(detail)" }
        if let hint { text += "\nHINT: \(hint)" }
        let fields = [("schema", schema), ("table", table), ("column", column), ("type", dataType),
                      ("constraint", constraint), ("position", position.map(String.init))]
            .compactMap { label, value in value.map { "\(label)=\($0)" } }
        if !fields.isEmpty { text += "\n" + fields.joined(separator: " ") }
        return text
    }

    /// The server error inside `error`, looking through transaction wrappers.
    public static func find(in error: any Error) -> PostgresError? {
        switch error {
        case let error as PostgresError: return error
        case let error as TransactionError: return find(in: error.underlying)
        default: return nil
        }
    }
}
