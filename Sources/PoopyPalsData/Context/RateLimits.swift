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
    /// Devices one IPv6 /48 may register at once, over all its /64s (each of which has its own bucket besides).
    public var wideRegistrationBurst: Int
    /// Registrations an hour a /48's bucket regains.
    public var wideRegistrationsPerHour: Int

    public init(writeBurst: Int = 2000, writesPerSecond: Int = 20, registrationBurst: Int = 30, registrationsPerHour: Int = 120,
                wideRegistrationBurst: Int = 300, wideRegistrationsPerHour: Int = 1200) {
        self.writeBurst = writeBurst
        self.writesPerSecond = writesPerSecond
        self.registrationBurst = registrationBurst
        self.registrationsPerHour = registrationsPerHour
        self.wideRegistrationBurst = wideRegistrationBurst
        self.wideRegistrationsPerHour = wideRegistrationsPerHour
    }

    /// From `POOPYPALS_DEVICE_WRITE_BURST` (500…1000000: a sync push of 500 must fit), `POOPYPALS_DEVICE_WRITES_PER_SECOND`
    /// (1…100000), `POOPYPALS_REGISTRATION_BURST` (1…1000000), `POOPYPALS_REGISTRATIONS_PER_HOUR` (1…100000000), and
    /// for an IPv6 /48 `POOPYPALS_REGISTRATION_BURST_48` (1…100000000) and `POOPYPALS_REGISTRATIONS_PER_HOUR_48`
    /// (1…1000000000).
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
            registrationsPerHour: try read("POOPYPALS_REGISTRATIONS_PER_HOUR", 1...100_000_000, default: defaults.registrationsPerHour),
            wideRegistrationBurst: try read("POOPYPALS_REGISTRATION_BURST_48", 1...100_000_000, default: defaults.wideRegistrationBurst),
            wideRegistrationsPerHour: try read("POOPYPALS_REGISTRATIONS_PER_HOUR_48", 1...1_000_000_000,
                                               default: defaults.wideRegistrationsPerHour))
    }

    /// The registration bucket's refill, a second, as `poopypals_register_device` takes it (sql/0027).
    var registrationRate: Double { Double(registrationsPerHour) / 3600 }
    /// The /48 bucket's (sql/0037).
    var wideRegistrationRate: Double { Double(wideRegistrationsPerHour) / 3600 }

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
}

/// The keys of client networks for their registration buckets (sql/0015, 0037): hex of HMAC-SHA-256 under a secret of
/// "poopypals.network.v2:" and the network's text (`v4:` and an address, `v6:` and a /64 or a /48, as `ClientNetwork`
/// names them). The database holds these keys, never an address, and without the secret (which it does not hold) a
/// key cannot be matched against the 2^32 IPv4 addresses, as the plain SHA-256 of before could (issue 58). Every
/// instance must use the same secret for the limit to hold across them.
public struct NetworkKeys: Sendable {
    private let secret: SymmetricKey

    /// `configured` (`POOPYPALS_NETWORK_KEY_SECRET`) when set, else a secret derived from the token secret
    /// (`AUTH_JWT_SECRET`, required in production, or `serve --dev`'s generated one) by HKDF-SHA-256 with a label of
    /// its own: every instance shares the token secret, so it shares this one. Changing either restarts every
    /// registration bucket full; nothing else depends on it.
    public init(configured: String? = nil, tokenSecret: String) {
        if let configured, !configured.isEmpty {
            secret = SymmetricKey(data: Array(configured.utf8))
        } else {
            secret = HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: Array(tokenSecret.utf8)),
                                            info: Array("poopypals.network-key.v2".utf8), outputByteCount: 32)
        }
    }

    /// The bucket key of `network` (what `ClientNetwork` names), as hex.
    public func key(_ network: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        let mac = HMAC<SHA256>.authenticationCode(for: Array(("poopypals.network.v2:" + network).utf8), using: secret)
        return String(decoding: mac.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }, as: UTF8.self)
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
