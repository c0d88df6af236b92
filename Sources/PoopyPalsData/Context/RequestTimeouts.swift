import Foundation
import Values

/// Time limits of every request transaction, set with `SET LOCAL` semantics in the same pipeline as the
/// device context (no extra round trip), so a request never waits on a lock or a slow plan without bound and
/// nothing keeps running on the server after its client has been answered.
public struct RequestTimeouts: Sendable, Equatable {
    /// `statement_timeout`: the longest one statement may run.
    public var statement: Duration
    /// `lock_timeout`: the longest one statement may wait for a lock; lower, so lock waits fail first and clearly.
    public var lock: Duration
    /// Added to `statement` to make a request's deadline, enforced by the client (`deadline`).
    public var deadlineMargin: Duration
    /// `idle_in_transaction_session_timeout`: a request's transaction left idle this long (a hung service) ends
    /// its session and releases its locks. Set per transaction, as the others, so that it holds behind PgBouncer
    /// too, which drops the startup options that set it per session.
    public var idleInTransaction: Duration = .seconds(60)

    /// How long the client waits for the database on one request, retries included: the statement timeout (which
    /// the server enforces on each statement) plus a margin. A round trip still unanswered then is abandoned —
    /// the server hung, or a COMMIT waits for a lost synchronous standby, which `statement_timeout` does not bound.
    public var deadline: Duration { statement + deadlineMargin }

    public static let allowed: ClosedRange<Duration> = .milliseconds(1) ... .seconds(600)

    public init(statement: Duration = .seconds(5), lock: Duration = .seconds(2), deadlineMargin: Duration = .seconds(1)) {
        self.statement = statement
        self.lock = lock
        self.deadlineMargin = deadlineMargin
    }

    public static let `default` = RequestTimeouts()

    /// From `POOPYPALS_STATEMENT_TIMEOUT`, `POOPYPALS_LOCK_TIMEOUT` and `POOPYPALS_DEADLINE_MARGIN` (`5s`, `500ms`,
    /// `1.5s`: `DurationText`).
    /// - Throws: `InvalidField` naming the variable when a value is malformed or outside 1 ms…600 s.
    public static func fromEnvironment(_ environment: [String: String]) throws(InvalidField) -> RequestTimeouts {
        var timeouts = RequestTimeouts.default
        if let text = environment["POOPYPALS_STATEMENT_TIMEOUT"], !text.isEmpty {
            timeouts.statement = try parse(text, name: "POOPYPALS_STATEMENT_TIMEOUT")
        }
        if let text = environment["POOPYPALS_LOCK_TIMEOUT"], !text.isEmpty {
            timeouts.lock = try parse(text, name: "POOPYPALS_LOCK_TIMEOUT")
        } else if timeouts.lock > timeouts.statement {
            timeouts.lock = timeouts.statement
        }
        if let text = environment["POOPYPALS_DEADLINE_MARGIN"], !text.isEmpty {
            timeouts.deadlineMargin = try parse(text, name: "POOPYPALS_DEADLINE_MARGIN")
        }
        return timeouts
    }

    /// A duration in the project's one grammar (`DurationText`: `5s`, `250ms`, `1.5s`, `2m`; a unit required),
    /// within `allowed`.
    /// - Throws: `InvalidField` naming `name`.
    public static func parse(_ text: String, name: String) throws(InvalidField) -> Duration {
        guard let duration = DurationText.parse(text) else {
            throw InvalidField(name, "must be a duration with a unit, such as 5s, 500ms, 1.5s or 2m")
        }
        guard allowed.contains(duration) else { throw InvalidField(name, "must be between 1ms and 600s") }
        return duration
    }

    /// Whole milliseconds, as `statement_timeout` and `lock_timeout` take them.
    static func milliseconds(_ duration: Duration) -> String {
        let clamped = min(max(duration, allowed.lowerBound), allowed.upperBound)
        return String(clamped.components.seconds * 1000 + clamped.components.attoseconds / 1_000_000_000_000_000)
    }
}
