/// A PostgreSQL SQLSTATE code, such as `23505`.
///
/// An extensible struct rather than an enum, so that codes this library does not name are kept intact.
/// Match errors with the named constants (`catch SQLState.uniqueViolation`) or by class
/// (`state.errorClass == SQLState.Class.integrityConstraintViolation`), never by message text.
public struct SQLState: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }

    /// The first two characters: the error class (`23` for integrity constraint violations).
    public var errorClass: Class { Class(rawValue: String(rawValue.prefix(2))) }

    /// The condition name from the PostgreSQL manual, when this library knows it.
    public var name: String? { Self.knownNames[self] }

    public var description: String { name.map { "\(rawValue) \($0)" } ?? rawValue }

    /// An SQLSTATE class: the first two characters of a code.
    public struct Class: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { self.rawValue = value }

        public static let connectionException: Class = "08"
        public static let dataException: Class = "22"
        public static let integrityConstraintViolation: Class = "23"
        public static let transactionRollback: Class = "40"
        public static let syntaxErrorOrAccessRuleViolation: Class = "42"
        public static let insufficientResources: Class = "53"
        public static let operatorIntervention: Class = "57"
    }

    public static let successfulCompletion: SQLState = "00000"
    public static let featureNotSupported: SQLState = "0A000"
    public static let invalidSQLStatementName: SQLState = "26000"
    public static let invalidTextRepresentation: SQLState = "22P02"
    public static let stringDataRightTruncation: SQLState = "22001"
    public static let numericValueOutOfRange: SQLState = "22003"
    public static let notNullViolation: SQLState = "23502"
    public static let foreignKeyViolation: SQLState = "23503"
    public static let uniqueViolation: SQLState = "23505"
    public static let checkViolation: SQLState = "23514"
    public static let exclusionViolation: SQLState = "23P01"
    public static let inFailedSQLTransaction: SQLState = "25P02"
    public static let readOnlySQLTransaction: SQLState = "25006"
    public static let invalidAuthorizationSpecification: SQLState = "28000"
    public static let invalidPassword: SQLState = "28P01"
    public static let serializationFailure: SQLState = "40001"
    public static let deadlockDetected: SQLState = "40P01"
    public static let syntaxError: SQLState = "42601"
    public static let insufficientPrivilege: SQLState = "42501"
    public static let duplicatePreparedStatement: SQLState = "42P05"
    /// PL/pgSQL `no_data_found`, raised by our functions for "the thing you act on does not exist".
    public static let noDataFound: SQLState = "P0002"
    public static let undefinedColumn: SQLState = "42703"
    public static let undefinedFunction: SQLState = "42883"
    public static let undefinedTable: SQLState = "42P01"
    public static let duplicateObject: SQLState = "42710"
    public static let duplicateTable: SQLState = "42P07"
    public static let duplicateDatabase: SQLState = "42P04"
    public static let lockNotAvailable: SQLState = "55P03"
    public static let objectInUse: SQLState = "55006"
    public static let queryCanceled: SQLState = "57014"
    public static let adminShutdown: SQLState = "57P01"
    public static let crashShutdown: SQLState = "57P02"
    public static let cannotConnectNow: SQLState = "57P03"
    public static let raiseException: SQLState = "P0001"

    private static let knownNames: [SQLState: String] = [
        .successfulCompletion: "successful_completion", .featureNotSupported: "feature_not_supported",
        .invalidSQLStatementName: "invalid_sql_statement_name",
        .invalidTextRepresentation: "invalid_text_representation",
        .stringDataRightTruncation: "string_data_right_truncation",
        .numericValueOutOfRange: "numeric_value_out_of_range", .notNullViolation: "not_null_violation",
        .foreignKeyViolation: "foreign_key_violation", .uniqueViolation: "unique_violation",
        .checkViolation: "check_violation", .exclusionViolation: "exclusion_violation",
        .inFailedSQLTransaction: "in_failed_sql_transaction", .readOnlySQLTransaction: "read_only_sql_transaction",
        .invalidAuthorizationSpecification: "invalid_authorization_specification",
        .invalidPassword: "invalid_password", .serializationFailure: "serialization_failure",
        .deadlockDetected: "deadlock_detected", .syntaxError: "syntax_error",
        .insufficientPrivilege: "insufficient_privilege", .undefinedColumn: "undefined_column",
        .undefinedFunction: "undefined_function", .undefinedTable: "undefined_table",
        .duplicateObject: "duplicate_object", .duplicateTable: "duplicate_table", .duplicateDatabase: "duplicate_database",
        .lockNotAvailable: "lock_not_available", .objectInUse: "object_in_use",
        .queryCanceled: "query_canceled", .adminShutdown: "admin_shutdown", .crashShutdown: "crash_shutdown",
        .cannotConnectNow: "cannot_connect_now", .raiseException: "raise_exception",
    ]
}

extension SQLState {
    /// The server this connection reaches cannot take the request, and nothing was done: a write reached a node
    /// that is (now) read-only (25006: a standby, or a primary demoted by a switchover), or the server is shutting
    /// down, crashed or not yet accepting (57P01, 57P02, 57P03), or the connection failed (class 08). The
    /// connection is worth nothing now; a fresh one (libpq picks a writable host of a multi-host URL) may succeed.
    public var meansTheNodeIsUnfit: Bool {
        self == .readOnlySQLTransaction || self == .adminShutdown || self == .crashShutdown || self == .cannotConnectNow
            || errorClass == .connectionException
    }

    /// Lets `catch SQLState.uniqueViolation` match a server error, also when it surfaced through a
    /// transaction's commit or rollback.
    public static func ~= (pattern: SQLState, error: any Error) -> Bool {
        PostgresError.find(in: error)?.sqlState == pattern
    }
}
