import PostgresClient

/// What a failure of the database means to a caller, in the data layer's words: the HTTP layer maps these and
/// never looks at the driver's error kinds or SQLSTATEs itself.
public enum DatabaseFailure: Error, Sendable, Equatable {
    /// Every connection was busy and none became free in time: overloaded, not broken.
    case busy
    /// A statement ran past its time, waited past the lock timeout, or was cancelled (shutdown): nothing changed.
    case timedOut
    /// No usable database: unreachable, refusing the login, read-only (a standby or a demoted primary), shutting
    /// down, or a pooled statement invalidated by a schema change.
    case unavailable(UnavailableReason)
    /// A value the database cannot store (a NUL character in text).
    case valueNotStorable

    public enum UnavailableReason: Sendable, Equatable {
        case unreachable
        case authenticationFailed
        case readOnly
        case other
    }

    /// The meaning of a driver error thrown by work of this layer; nil for anything else (a bug: 500).
    public init?(classifying error: any Error) {
        if let error = error as? DatabaseFailure {
            self = error
            return
        }
        if let error = error as? TransactionError {
            self.init(classifying: error.underlying)
            return
        }
        if let error = error as? PostgresClientError {
            switch error.kind {
            case .poolTimeout: self = .busy
            // Abandoned before COMMIT was sent (after it, the data layer reports OutcomeUnknown).
            case .deadlineExceeded: self = .timedOut
            case .connectionFailed:
                switch error.connectionFailure {
                case .authenticationFailed?: self = .unavailable(.authenticationFailed)
                case .unreachable?: self = .unavailable(.unreachable)
                case nil: self = .unavailable(.other)
                }
            case .connectionLost, .poolClosed, .statementInvalidated: self = .unavailable(.other)
            case .invalidParameter: self = .valueNotStorable
            default: return nil
            }
            return
        }
        if let error = error as? PostgresError {
            // A statement that ran out of time or waited too long for a lock: the server has stopped it.
            if error.sqlState == .queryCanceled || error.sqlState == .lockNotAvailable {
                self = .timedOut
            } else if error.sqlState == .readOnlySQLTransaction {
                self = .unavailable(.readOnly)
            } else if error.sqlState.meansTheNodeIsUnfit {
                self = .unavailable(.other)
            } else {
                switch error.sqlState.errorClass {
                case .connectionException, .insufficientResources, .operatorIntervention: self = .unavailable(.other)
                default: return nil
                }
            }
            return
        }
        if error is CancellationError {
            self = .timedOut
            return
        }
        return nil
    }
}

extension Database {
    /// Readiness: one round trip that does what every request does first (begin, switch to the service role,
    /// commit) and asks whether the node takes writes, on `probe` (the service's own connection for probes),
    /// bounded by a 2 s statement timeout and a 3 s deadline the client enforces (a hung node cannot hold the
    /// probe). A read-only node (a standby, or a primary demoted by a switchover, reached through a pooler or a
    /// connection made before) is not ready: its connection is dropped, so the next probe connects afresh, to the
    /// writable host if any.
    /// - Throws: `DatabaseFailure` (`.unavailable(.readOnly)` for a node that takes no writes), never a driver error.
    public func checkReadiness(on probe: ConnectionPool? = nil) async throws(DatabaseFailure) {
        let pool = probe ?? self.pool
        let writable: Bool
        do {
            writable = try await pool.withConnection(limits: .within(.seconds(3))) { connection -> Bool in
                let results = try connection.pipeline([
                    "BEGIN",
                    """
                    SELECT set_config('statement_timeout', '2000', true), set_config('role', \(Database.serviceRole), true), \
                    current_setting('transaction_read_only') = 'off' AS writable
                    """,
                    "COMMIT",
                ])
                let writable = try results[1][0].decode("writable", as: Bool.self)
                if !writable { connection.discardAfterUse() }
                return writable
            }
        } catch {
            throw DatabaseFailure(classifying: error) ?? .unavailable(.other)
        }
        guard writable else { throw .unavailable(.readOnly) }
    }

    /// True when the service's login is a superuser or has BYPASSRLS: every policy is then ignored, FORCEd or
    /// not (`RLSAudit` reports the same among its checks). Nil when it could not be asked.
    public static func loginBypassesRowLevelSecurity(on pool: ConnectionPool) async -> Bool? {
        try? await pool.withConnection { connection in
            try connection.query("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
                .first?.decode(0, as: Bool.self)
        }
    }
}
