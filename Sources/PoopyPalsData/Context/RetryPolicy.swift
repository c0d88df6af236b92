import PostgresClient

/// When and how often work marked idempotent is tried again.
public struct RetryPolicy: Sendable {
    /// Attempts in all, the first included.
    public var maxAttempts: Int
    public var baseDelay: Duration
    public var maxDelay: Duration

    public init(maxAttempts: Int = 4, baseDelay: Duration = .milliseconds(20), maxDelay: Duration = .seconds(1)) {
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    public static let `default` = RetryPolicy()
    public static let never = RetryPolicy(maxAttempts: 1)

    /// What a failed attempt left behind, as far as the client can tell.
    public enum Verdict: Sendable, Equatable {
        /// Nothing was committed, and the same work may succeed if tried again (on a fresh connection).
        case retryable
        /// COMMIT was sent and no answer came back (the connection was lost, or its deadline passed, or the server
        /// went down while it waited for the synchronous standby): the work may or may not have been committed.
        case outcomeUnknown
        /// The failure is the answer (a constraint, bad input, a timeout the server enforced): nothing was committed.
        case final
    }

    /// Classifies a failed attempt. Retryable: serialization failures and deadlocks; a node that cannot serve —
    /// read-only after a switchover (25006), shutting down, crashed or starting (57P01, 57P02, 57P03), a connection
    /// exception (class 08) — answered before COMMIT; a failed connect; a connection lost or a deadline passed
    /// before COMMIT was sent. The same losses after COMMIT was sent leave the outcome unknown.
    public func verdict(_ error: any Error, commitSent: Bool) -> Verdict {
        if let server = PostgresError.find(in: error) {
            let state = server.sqlState
            if state == .serializationFailure || state == .deadlockDetected { return .retryable }
            guard state.meansTheNodeIsUnfit else { return .final }
            // An error answered to COMMIT itself (the server shut down while the commit waited for its standby:
            // "the transaction has already committed locally") says nothing about whether it committed.
            return (error as? TransactionError)?.phase == .commit ? .outcomeUnknown : .retryable
        }
        switch PostgresClientError.find(in: error)?.kind {
        case .connectionFailed?: return .retryable
        case .connectionLost?, .deadlineExceeded?: return commitSent ? .outcomeUnknown : .retryable
        default: return .final
        }
    }

    /// True when `verdict` says `.retryable` (nothing was committed and trying again may succeed).
    public func isRetryable(_ error: any Error, commitSent: Bool) -> Bool {
        verdict(error, commitSent: commitSent) == .retryable
    }

    /// Exponential backoff with full jitter: uniformly random up to base × 2^(attempt−1), capped.
    public func delay(afterAttempt attempt: Int) -> Duration {
        let ceiling = min(maxDelay, baseDelay * (1 << min(attempt - 1, 20)))
        let fraction = Double.random(in: 0...1)
        return .nanoseconds(Int64(Double(ceiling.components.seconds * 1_000_000_000 + ceiling.components.attoseconds / 1_000_000_000) * fraction))
    }
}
