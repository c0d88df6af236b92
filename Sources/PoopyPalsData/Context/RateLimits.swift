import Crypto
import PostgresClient

/// Rate limits kept in the database (sql/0015), so that every instance shares them: log writes per device (a token
/// bucket on the device row) and device registrations per client network (a bucket per network). A request past
/// either is refused whole (`RateLimited`), with the seconds to wait.
public struct RateLimits: Sendable, Equatable {
    public static let `default` = RateLimits()

    /// Log writes (each created, changed or deleted log) a device may make at once: at least a full sync push.
    public var writeBurst: Int
    /// Log writes a second a device's bucket regains.
    public var writesPerSecond: Int
    /// Devices one client network may register at once.
    public var registrationBurst: Int
    /// Registrations an hour a network's bucket regains.
    public var registrationsPerHour: Int

    public init(writeBurst: Int = 2000, writesPerSecond: Int = 20, registrationBurst: Int = 30, registrationsPerHour: Int = 120) {
        self.writeBurst = writeBurst
        self.writesPerSecond = writesPerSecond
        self.registrationBurst = registrationBurst
        self.registrationsPerHour = registrationsPerHour
    }

    /// From `POOPYPALS_DEVICE_WRITE_BURST` (500…1000000: a sync push of 500 must fit), `POOPYPALS_DEVICE_WRITES_PER_SECOND`
    /// (1…100000), `POOPYPALS_REGISTRATION_BURST` (1…1000000) and `POOPYPALS_REGISTRATIONS_PER_HOUR` (1…100000000).
    /// - Throws: `InvalidField` naming the variable.
    public static func fromEnvironment(_ environment: [String: String]) throws -> RateLimits {
        func read(_ name: String, _ range: ClosedRange<Int>, default value: Int) throws -> Int {
            try EnvironmentNumber.read(name, in: range, default: value, from: environment)
        }
        let defaults = RateLimits.default
        return RateLimits(
            writeBurst: try read("POOPYPALS_DEVICE_WRITE_BURST", 500...1_000_000, default: defaults.writeBurst),
            writesPerSecond: try read("POOPYPALS_DEVICE_WRITES_PER_SECOND", 1...100_000, default: defaults.writesPerSecond),
            registrationBurst: try read("POOPYPALS_REGISTRATION_BURST", 1...1_000_000, default: defaults.registrationBurst),
            registrationsPerHour: try read("POOPYPALS_REGISTRATIONS_PER_HOUR", 1...100_000_000, default: defaults.registrationsPerHour))
    }

    /// The registration bucket's refill, a second, as `poopypals_register_device` takes it (sql/0027).
    var registrationRate: Double { Double(registrationsPerHour) / 3600 }

    /// sql/0015's refusals (SQLSTATE PPR01 device writes, PPR02 registrations), with the seconds to wait from their
    /// DETAIL; nil for any other error.
    func exceeded(by error: any Error) -> RateLimited? {
        guard let error = PostgresError.find(in: error) else { return nil }
        let wait = max(1, min(Int(error.detail ?? "") ?? 1, 86_400))
        switch error.sqlState.rawValue {
        case "PPR01": return RateLimited(kind: .deviceWrites, retryAfter: wait, quota: writeBurst,
                                         window: max(1, writeBurst / writesPerSecond))
        case "PPR02": return RateLimited(kind: .registrations, retryAfter: wait, quota: registrationBurst,
                                         window: max(1, registrationBurst * 3600 / registrationsPerHour))
        default: return nil
        }
    }

    /// The key of a client's network for its registration bucket: hex of SHA-256("poopypals.network.v1:" + the
    /// network's text), so that the database never holds an address. `network` is what `ClientNetwork` names.
    public static func networkKey(_ network: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        let digest = SHA256.hash(data: Array(("poopypals.network.v1:" + network).utf8))
        return String(decoding: digest.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }, as: UTF8.self)
    }
}

/// A rate limit refused the request; nothing of it was stored. Retry after `retryAfter` seconds.
public struct RateLimited: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable, Equatable {
        case deviceWrites = "device-writes"
        case registrations
    }

    public let kind: Kind
    public let retryAfter: Int
    /// The policy, as the IETF RateLimit-Policy header gives it: `quota` units a `window` of seconds.
    public let quota: Int
    public let window: Int

    public var description: String {
        switch kind {
        case .deviceWrites: "this device writes faster than its limit; nothing was changed; retry in \(retryAfter) s"
        case .registrations: "too many devices were registered from this network; retry in \(retryAfter) s"
        }
    }
}
