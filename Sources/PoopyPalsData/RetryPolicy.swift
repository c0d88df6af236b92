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

    /// Serialization failures and deadlocks are safe to retry; so is a lost connection, but only before
    /// COMMIT was sent (after it, the transaction may have committed); and a failed connect, since nothing ran.
    public func isRetryable(_ error: any Error, commitSent: Bool) -> Bool {
        if let state = PostgresError.find(in: error)?.sqlState {
            return state == .serializationFailure || state == .deadlockDetected
        }
        switch PostgresClientError.find(in: error)?.kind {
        case .connectionFailed: return true
        case .connectionLost: return !commitSent
        default: return false
        }
    }

    /// Exponential backoff with full jitter: uniformly random up to base × 2^(attempt−1), capped.
    public func delay(afterAttempt attempt: Int) -> Duration {
        let ceiling = min(maxDelay, baseDelay * (1 << min(attempt - 1, 20)))
        let fraction = Double.random(in: 0...1)
        return .nanoseconds(Int64(Double(ceiling.components.seconds * 1_000_000_000 + ceiling.components.attoseconds / 1_000_000_000) * fraction))
    }
}
