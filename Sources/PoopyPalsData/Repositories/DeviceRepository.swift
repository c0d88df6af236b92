import Foundation
import PostgresClient

/// The calling device's own row. Row-level security limits every statement to it.
public struct DeviceRepository: Sendable {
    public struct Registration: Sendable {
        public let device: Device
        /// True when this call created the row, false when it updated it.
        public let created: Bool
    }

    let database: Database

    public init(database: Database) {
        self.database = database
    }

    /// Inserts or updates the calling device (meant for every launch): one statement, one round trip.
    /// A new device must have a strong (random, version 4) id; a device registered before that rule with
    /// another kind keeps working, but no new one is created with it.
    /// - Throws: `InvalidField` before anything is sent; `RepositoryError.weakDeviceID` for a weak id that
    ///   is not registered; `PostgresError` otherwise.
    ///
    /// With `network` (the key of the client's network, as `NetworkKeys` makes it), a device really created takes a
    /// token of that network's registration bucket (sql/0015), in the same statement: `RateLimited` when it is empty;
    /// with `wideNetwork` (an IPv6 client's /48), one of that bucket's too (sql/0037).
    public func register(_ info: DeviceInfo, as device: DeviceID, network: String? = nil, wideNetwork: String? = nil) async throws -> Registration {
        try info.validate()
        let rates = database.rates
        let (burst, rate) = (Double(rates.registrationBurst), rates.registrationRate)
        let (wideBurst, wideRate) = (Double(rates.wideRegistrationBurst), rates.wideRegistrationRate)
        // sql/0027: the function finds the device by the key map, creates it (with the network's registration token
        // and its map row) or updates it, in the request's one statement.
        return try await database.asDevice(device, idempotent: true) { tx in
            // The device's stored id is looked up after it, in the same round trip, and kept for the requests to come.
            // With a /48 (an IPv6 client) the form that also takes its token (sql/0037); else 0027's, as before.
            let row = try (wideNetwork.map { wide in
                try tx.finalQueryThenStoredID("""
                    SELECT outcome, \(unescaped: Device.columns) FROM poopypals_register_device(
                        \(info.model), \(info.osVersion), \(info.appVersion), \(info.buildNumber), \(info.isSimulator),
                        \(device.isStrong), \(network ?? ""), \(burst), \(rate), \(wide), \(wideBurst), \(wideRate))
                    """)
            } ?? tx.finalQueryThenStoredID("""
                SELECT outcome, \(unescaped: Device.columns) FROM poopypals_register_device(
                    \(info.model), \(info.osVersion), \(info.appVersion), \(info.buildNumber), \(info.isSimulator),
                    \(device.isStrong), \(network ?? ""), \(burst), \(rate))
                """))[0]
            switch try row.decode("outcome", as: String.self) {
            case "created": return Registration(device: try Device(row: row, id: device), created: true)
            case "updated": return Registration(device: try Device(row: row, id: device), created: false)
            case "being_erased": throw RepositoryError.deviceBeingErased
            // A weak id may update its device but not create one.
            case "not_registered": throw RepositoryError.weakDeviceID
            default: throw PostgresClientError(.unsupported, "poopypals_register_device answered an outcome this service does not know")
            }
        }
    }

    /// The calling device's row, or nil before it registered.
    public func current(as device: DeviceID, consistency: ConsistencyToken? = nil) async throws -> Device? {
        try await database.asDevice(device, idempotent: true, readOnly: true, consistency: consistency) { tx in
            guard let stored = try tx.storedID() else { return nil }
            return try tx.finalQuery("SELECT \(unescaped: Device.columns) FROM devices WHERE id = \(stored)").first.map { try Device(row: $0, id: device) }
        }
    }

    /// Moves the calling device, with its logs, tombstones, profile link and sync state, to `newID`, in one
    /// transaction and one round trip (sql/0010). Afterwards `device` is an unknown device.
    /// - Throws: `RepositoryError.weakDeviceID` (before anything is sent) when `newID` is not a random UUID;
    ///   `.deviceNotRegistered` when `device` is unknown; `.deviceIDInUse` when `newID` is registered (nothing
    ///   changes); `PostgresError` otherwise. Not retried: after a lost COMMIT the outcome is read by using
    ///   `newID`.
    public func rotate(as device: DeviceID, to newID: DeviceID) async throws -> Device {
        guard newID.isStrong else { throw RepositoryError.weakDeviceID }
        // The old key stands for no device afterwards: its kept id is dropped here (elsewhere its check drops it).
        defer { database.keptIDs.forget(device.key) }
        return try await database.asDevice(device) { tx in
            let row = try tx.finalQuery("""
                SELECT outcome, \(unescaped: Device.columns) FROM poopypals_rotate_device(\(newID.key))
                """)[0]
            switch try row.decode("outcome", as: String.self) {
            case "rotated": return try Device(row: row, id: newID)
            case "in_use": throw RepositoryError.deviceIDInUse
            default: throw RepositoryError.deviceNotRegistered
            }
        }
    }

    /// What one `erase(as:)` call did.
    public struct Erasure: Sendable, Equatable {
        /// Logs this call deleted.
        public let logs: Int64
        /// True when the device's profile was deleted too (no other device linked to it).
        public let profileErased: Bool
        /// Logs still to delete (`PendingErasures` does it in the background); 0 when the device is gone.
        public let logsRemaining: Int64
    }

    /// Logs deleted per transaction of an erasure: small enough for the request's time limit on this machine's
    /// slowest run (`LargeDeviceTests` prints the rate), large enough that a million logs take a few hundred batches.
    public static let erasureBatch = 5_000

    /// Erases the calling device (sql/0021). The first call stops it at once: from then on its id is an unknown
    /// device to every other call, and cannot be registered again until the erasure ends. Its profile is unlinked, and
    /// erased when `subject` (proved by the caller's token) is the profile's and no other device links to it; without
    /// it the profile stays, for its owner to erase. Each call deletes up to `batch` logs; the device row, tombstones
    /// and sync history go with the last of them. What remains is erased by `PendingErasures` (or a later call,
    /// which also reports progress). Nil when the device is not registered and no erasure of it is under way.
    /// - Throws: `PostgresError`.
    public func erase(as device: DeviceID, subject: UUID? = nil, batch: Int = DeviceRepository.erasureBatch) async throws -> Erasure? {
        defer { database.keptIDs.forget(device.key) }
        return try await database.asDevice(device, idempotent: true) { tx in
            let row = try tx.finalQuery("""
                SELECT erased, logs, profile_erased, logs_remaining FROM poopypals_erase_device(\(subject), \(max(1, batch)))
                """)[0]
            guard try row.decode("erased", as: Bool.self) else { return nil }
            return Erasure(logs: try row.decode("logs"), profileErased: try row.decode("profile_erased"),
                           logsRemaining: try row.decode("logs_remaining"))
        }
    }
}
