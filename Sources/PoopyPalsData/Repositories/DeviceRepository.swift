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
    /// With `network` (the client's, as `RateLimits.networkKey` makes it), a device really created takes a token of
    /// that network's registration bucket (sql/0015), in the same statement: `RateLimited` when it is empty.
    public func register(_ info: DeviceInfo, as device: DeviceID, network: String? = nil) async throws -> Registration {
        try info.validate()
        let strong = device.isStrong
        let rates = database.rates
        let (burst, rate) = (String(rates.registrationBurst), rates.registrationRate)
        do {
            return try await upsert(info, as: device, strong: strong, network: network, burst: burst, rate: rate)
        } catch where strong && Self.isRowSecurityRefusal(error) {
            // PostgreSQL 14.25, 15.20, 16.16, 17.12 and 18.7 (CVE-2026-120154) check an upsert's conflicting row
            // against the row-level security policies before the DO UPDATE's WHERE: the row of a device being erased,
            // which get_current_device_id() hides from every request, now fails the statement where it updated
            // nothing before. Its key is taken, yet the device is invisible to its own key on the primary: being
            // erased. Anything else is thrown as it came.
            if try await database.asDevice(device, idempotent: true, { tx in
                try tx.finalQuery("SELECT 1 FROM devices WHERE key = \(device.key)").isEmpty
            }) {
                throw RepositoryError.deviceBeingErased
            }
            throw error
        }
    }

    /// A row-level security refusal on `devices` (42501 with PostgreSQL's English message; a server that speaks
    /// another language answers 500 here rather than a guess).
    static func isRowSecurityRefusal(_ error: any Error) -> Bool {
        guard let error = PostgresError.find(in: error), error.sqlState == .insufficientPrivilege else { return false }
        return error.message.contains("row-level security policy") && error.message.contains("\"devices\"")
    }

    private func upsert(_ info: DeviceInfo, as device: DeviceID, strong: Bool, network: String?, burst: String, rate: String)
        async throws -> Registration {
        try await database.asDevice(device, idempotent: true) { tx in
            let rows = if strong {
                // The bucket's settings come first, from the SELECT's own FROM: the AFTER INSERT trigger reads them.
                try tx.finalQuery("""
                    INSERT INTO devices (key, model, os_version, app_version, build_number, is_simulator)
                    SELECT \(device.key), \(info.model), \(info.osVersion), \(info.appVersion), \(info.buildNumber), \(info.isSimulator)
                    FROM (SELECT set_config('poopypals.client_network', \(network ?? ""), true),
                                 set_config('poopypals.registration_burst', \(burst), true),
                                 set_config('poopypals.registration_rate', \(rate), true)) AS registration
                    ON CONFLICT (key) DO UPDATE SET
                        model = EXCLUDED.model, os_version = EXCLUDED.os_version, app_version = EXCLUDED.app_version,
                        build_number = EXCLUDED.build_number, is_simulator = EXCLUDED.is_simulator, last_seen_at = now()
                    WHERE devices.erasing_since IS NULL
                    RETURNING \(unescaped: Device.columns), (xmax = 0) AS inserted
                    """)
            } else {
                try tx.finalQuery("""
                    UPDATE devices SET model = \(info.model), os_version = \(info.osVersion), app_version = \(info.appVersion),
                        build_number = \(info.buildNumber), is_simulator = \(info.isSimulator), last_seen_at = now()
                    WHERE key = \(device.key)
                    RETURNING \(unescaped: Device.columns), false AS inserted
                    """)
            }
            // Nothing inserted or updated: a weak id that is not registered, or a strong one whose erasure is under way.
            guard let row = rows.first else { throw strong ? RepositoryError.deviceBeingErased : RepositoryError.weakDeviceID }
            return Registration(device: try Device(row: row, id: device), created: try row.decode("inserted"))
        }
    }

    /// The calling device's row, or nil before it registered.
    public func current(as device: DeviceID, consistency: ConsistencyToken? = nil) async throws -> Device? {
        try await database.asDevice(device, idempotent: true, readOnly: true, consistency: consistency) { tx in
            try tx.finalQuery("SELECT \(unescaped: Device.columns) FROM devices WHERE key = \(device.key)").first.map { try Device(row: $0, id: device) }
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
        try await database.asDevice(device, idempotent: true) { tx in
            let row = try tx.finalQuery("""
                SELECT erased, logs, profile_erased, logs_remaining FROM poopypals_erase_device(\(subject), \(max(1, batch)))
                """)[0]
            guard try row.decode("erased", as: Bool.self) else { return nil }
            return Erasure(logs: try row.decode("logs"), profileErased: try row.decode("profile_erased"),
                           logsRemaining: try row.decode("logs_remaining"))
        }
    }
}
