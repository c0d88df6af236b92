/// A write whose COMMIT was sent but never answered (the connection was lost, its deadline passed, or the server
/// shut down while the commit waited for its synchronous standby), and which could not be resolved by replaying it
/// within the request's deadline: it may or may not have been committed. Never reported as "nothing changed".
public struct OutcomeUnknown: Error, Sendable, CustomStringConvertible {
    /// What was seen: the client's or the server's error, never a value of the request.
    public let cause: String

    public init(cause: any Error) {
        self.cause = "\(cause)"
    }

    public var description: String { "the outcome of a sent COMMIT is unknown: \(cause)" }
}
