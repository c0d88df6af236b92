import Foundation

/// Time limits of every request transaction, set with `SET LOCAL` semantics in the same pipeline as the
/// device context (no extra round trip), so a request never waits on a lock or a slow plan without bound and
/// nothing keeps running on the server after its client has been answered.
public struct RequestTimeouts: Sendable, Equatable {
    /// `statement_timeout`: the longest one statement may run.
    public var statement: Duration
    /// `lock_timeout`: the longest one statement may wait for a lock; lower, so lock waits fail first and clearly.
    public var lock: Duration

    public static let allowed: ClosedRange<Duration> = .milliseconds(1) ... .seconds(600)

    public init(statement: Duration = .seconds(5), lock: Duration = .seconds(2)) {
        self.statement = statement
        self.lock = lock
    }

    public static let `default` = RequestTimeouts()

    /// From `POOPYPALS_STATEMENT_TIMEOUT` and `POOPYPALS_LOCK_TIMEOUT` (`5s`, `500ms`, or plain milliseconds).
    /// - Throws: `InvalidField` naming the variable when a value is malformed or outside 1 ms…600 s.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws(InvalidField) -> RequestTimeouts {
        var timeouts = RequestTimeouts.default
        if let text = environment["POOPYPALS_STATEMENT_TIMEOUT"], !text.isEmpty {
            timeouts.statement = try parse(text, name: "POOPYPALS_STATEMENT_TIMEOUT")
        }
        if let text = environment["POOPYPALS_LOCK_TIMEOUT"], !text.isEmpty {
            timeouts.lock = try parse(text, name: "POOPYPALS_LOCK_TIMEOUT")
        } else if timeouts.lock > timeouts.statement {
            timeouts.lock = timeouts.statement
        }
        return timeouts
    }

    /// `5s`, `250ms`, `2m`, or a whole number of milliseconds, within `allowed`.
    /// - Throws: `InvalidField` naming `name`.
    public static func parse(_ text: String, name: String) throws(InvalidField) -> Duration {
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000)]
        var digits = Substring(text.trimmingCharacters(in: .whitespaces))
        var scale: Int64 = 1
        for (suffix, factor) in units where digits.hasSuffix(suffix) {
            digits = digits.dropLast(suffix.count)
            scale = factor
            break
        }
        // At most 7 digits: no overflow below, whatever the unit.
        guard (1...7).contains(digits.count), digits.allSatisfy(\.isASCII), let value = Int64(digits) else {
            throw InvalidField(name, "must be a duration such as 5s, 500ms or 2m")
        }
        let duration = Duration.milliseconds(value * scale)
        guard allowed.contains(duration) else { throw InvalidField(name, "must be between 1ms and 600s") }
        return duration
    }

    /// Whole milliseconds, as `statement_timeout` and `lock_timeout` take them.
    static func milliseconds(_ duration: Duration) -> String {
        let clamped = min(max(duration, allowed.lowerBound), allowed.upperBound)
        return String(clamped.components.seconds * 1000 + clamped.components.attoseconds / 1_000_000_000_000_000)
    }
}
