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
