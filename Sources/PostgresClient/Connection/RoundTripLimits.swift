/// How long a borrower's round trips may wait for the server before the client gives up on them: a deadline for
/// all of them (a request's), a bound on each one (work of many round trips, such as an export), or both. A round
/// trip in flight past either is abandoned (`RoundTripWatch.abandon()`); the pool's watchdog looks every 50 ms.
public struct RoundTripLimits: Sendable, Equatable {
    /// Monotonic nanoseconds (`RoundTripWatch.now()`) after which no round trip may still be in flight.
    public var deadline: Int64?
    /// The longest one round trip may be in flight, in nanoseconds.
    public var perRoundTrip: Int64?
    /// No round trip is abandoned before it has been in flight this long, in nanoseconds, whatever the deadline:
    /// the server's own `statement_timeout` gets its chance to answer first (a clear 57014, nothing committed),
    /// also when connecting or waiting for a connection took much of the deadline on a loaded machine.
    public var minimumInFlight: Int64?

    public init(deadline: Int64? = nil, perRoundTrip: Int64? = nil, minimumInFlight: Int64? = nil) {
        self.deadline = deadline
        self.perRoundTrip = perRoundTrip
        self.minimumInFlight = minimumInFlight
    }

    /// A deadline `duration` from now, and no round trip abandoned before it has been in flight that long.
    public static func within(_ duration: Duration) -> RoundTripLimits {
        RoundTripLimits(deadline: RoundTripWatch.now() &+ duration.nanoseconds, minimumInFlight: duration.nanoseconds)
    }

    /// True when a round trip sent at `sentAt` has outlived these limits at `now`.
    func expired(sentAt: Int64, now: Int64) -> Bool {
        let inFlight = now &- sentAt
        if let minimumInFlight, inFlight < minimumInFlight { return false }
        if let deadline, now >= deadline { return true }
        if let perRoundTrip, inFlight >= perRoundTrip { return true }
        return false
    }
}

extension Duration {
    /// Whole nanoseconds, saturating (a duration beyond ±292 years is taken as that).
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (total, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflow2 ? (seconds < 0 ? .min : .max) : total
    }
}
