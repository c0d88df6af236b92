import PostgresClient

/// What one device may store (sql/0014): live logs, and deleted logs whose tombstones await their purge. Counted
/// on the device row by the database, so that every instance shares them; a write past either is refused whole
/// (`QuotaExceeded`). Defaults sized for a lifetime of honest use: a log a day for 270 years; a day's deletes of
/// 200 logs for the 90 days of tombstone retention.
public struct DeviceQuotas: Sendable, Equatable {
    public static let allowed = 1...10_000_000
    public static let `default` = DeviceQuotas()

    public var maxLogs: Int
    public var maxTombstones: Int

    public init(maxLogs: Int = 100_000, maxTombstones: Int = 20_000) {
        self.maxLogs = maxLogs
        self.maxTombstones = maxTombstones
    }

    /// sql/0014's refusals (SQLSTATE PPQ01 logs, PPQ02 tombstones), with these quotas; nil for any other error.
    func exceeded(by error: any Error) -> QuotaExceeded? {
        switch PostgresError.find(in: error)?.sqlState.rawValue {
        case "PPQ01"?: QuotaExceeded(kind: .logs, limit: maxLogs)
        case "PPQ02"?: QuotaExceeded(kind: .tombstones, limit: maxTombstones)
        default: nil
        }
    }

    /// From `POOPYPALS_MAX_LOGS_PER_DEVICE` and `POOPYPALS_MAX_TOMBSTONES_PER_DEVICE` (defaults when unset).
    /// - Throws: `InvalidField` naming the variable when it is not a whole number in `allowed`.
    public static func fromEnvironment(_ environment: [String: String]) throws -> DeviceQuotas {
        func read(_ name: String, default value: Int) throws -> Int {
            try EnvironmentNumber.read(name, in: allowed, default: value, from: environment)
        }
        let defaults = DeviceQuotas.default
        return DeviceQuotas(maxLogs: try read("POOPYPALS_MAX_LOGS_PER_DEVICE", default: defaults.maxLogs),
                            maxTombstones: try read("POOPYPALS_MAX_TOMBSTONES_PER_DEVICE", default: defaults.maxTombstones))
    }
}

/// A write would take the device past one of its quotas; nothing of it was stored.
public struct QuotaExceeded: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable { case logs, tombstones }
    public let kind: Kind
    public let limit: Int

    public var description: String {
        switch kind {
        case .logs: "this device holds its maximum of \(limit) logs: delete some before adding more"
        case .tombstones: "this device has deleted its maximum of \(limit) logs within the tombstone retention: try again later"
        }
    }
}
