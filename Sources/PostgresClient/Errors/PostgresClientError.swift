/// An error raised on the client side: the server never saw the statement, or the connection failed.
/// Messages never contain passwords or bound values.
public struct PostgresClientError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// Connecting failed (server unreachable, authentication failed, bad connection string).
        case connectionFailed
        /// The connection broke while in use; whether the statement ran is unknown.
        case connectionLost
        /// A round trip outlived its deadline and was abandoned on the client (the server hung, or a COMMIT waited
        /// for a lost synchronous standby); the connection is closed. Whether the statement ran is unknown.
        case deadlineExceeded
        /// A bound value cannot be sent as is (for example a string with a NUL byte).
        case invalidParameter
        /// The pool could not hand out a connection within its timeout.
        case poolTimeout
        /// The pool was closed.
        case poolClosed
        /// A pipelined statement that the server skipped because an earlier one failed.
        case skipped
        /// A cached prepared statement went stale inside a transaction (an online schema change, a session
        /// reset); the transaction was rolled back by the server and is safe to run again.
        case statementInvalidated
        /// A caller's misuse of the API (for example a statement after the final one of a transaction).
        case misuse
        /// libpq or the server did something this client does not handle (for example COPY).
        case unsupported
    }

    /// Why a connection failed, as libpq tells it apart without reading its message: the server asked for a
    /// password (`PQconnectionNeedsPassword`, `PQconnectionUsedPassword`) and refused the login, or it was not
    /// reached (or refused before authentication).
    public enum ConnectionFailure: String, Sendable {
        /// The server asked for a password and refused the login: wrong or missing credentials, or no access.
        case authenticationFailed = "authentication failed"
        /// No server answered (down, wrong host or port, network), or it refused before authentication.
        case unreachable
    }

    public let kind: Kind
    public let message: String
    /// For `.connectionFailed` from a connection attempt: which of the two it was.
    public var connectionFailure: ConnectionFailure?

    public init(_ kind: Kind, _ message: String, connectionFailure: ConnectionFailure? = nil) {
        self.kind = kind
        self.message = message
        self.connectionFailure = connectionFailure
    }

    public var description: String { message }

    /// The client error in `error`, also when a transaction phase wraps it.
    public static func find(in error: any Error) -> PostgresClientError? {
        switch error {
        case let error as PostgresClientError: return error
        case let error as TransactionError: return find(in: error.underlying)
        default: return nil
        }
    }
}

/// A value could not be decoded into the requested Swift type. Names the column and the types, never the value.
public struct PostgresDecodingError: Error, Sendable, CustomStringConvertible {
    public let column: String
    public let expected: String
    /// PostgreSQL type name of the column (for example `int4`), or its OID when unknown.
    public let actualType: String
    public let reason: String

    public var description: String {
        "cannot decode column \"\(column)\" of type \(actualType) as \(expected): \(reason)"
    }
}

/// A transaction step failed outside the body: beginning, committing or rolling back.
///
/// An error thrown by the body itself is rethrown unchanged after the rollback (so callers can catch their
/// own errors); it is wrapped here, as `bodyError`, only when the rollback failed too.
public struct TransactionError: Error, Sendable, CustomStringConvertible {
    public enum Phase: String, Sendable { case begin, rollback, commit }

    public let phase: Phase
    public let underlying: any Error
    /// With `phase == .rollback`: the body's error that led to the rollback.
    public let bodyError: (any Error)?

    public init(phase: Phase, underlying: any Error, bodyError: (any Error)? = nil) {
        self.phase = phase
        self.underlying = underlying
        self.bodyError = bodyError
    }

    public var description: String {
        var text = "transaction failed at \(phase.rawValue): \(underlying)"
        if let bodyError { text += " (after the body failed: \(bodyError))" }
        return text
    }
}
