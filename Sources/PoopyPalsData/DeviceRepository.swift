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
    /// - Throws: `InvalidField` before anything is sent; `PostgresError` otherwise.
    public func register(_ info: DeviceInfo, as device: DeviceID) async throws -> Registration {
        try info.validate()
        return try await database.asDevice(device, idempotent: true) { tx in
            let row = try tx.finalQuery("""
                INSERT INTO devices (id, model, os_version, app_version, build_number, is_simulator)
                VALUES (\(device.uuid), \(info.model), \(info.osVersion), \(info.appVersion), \(info.buildNumber), \(info.isSimulator))
                ON CONFLICT (id) DO UPDATE SET
                    model = EXCLUDED.model, os_version = EXCLUDED.os_version, app_version = EXCLUDED.app_version,
                    build_number = EXCLUDED.build_number, is_simulator = EXCLUDED.is_simulator, last_seen_at = now()
                RETURNING \(unescaped: Device.columns), (xmax = 0) AS inserted
                """)[0]
            return Registration(device: try Device(row: row), created: try row.decode("inserted"))
        }
    }

    /// The calling device's row, or nil before it registered.
    public func current(as device: DeviceID) async throws -> Device? {
        try await database.asDevice(device, idempotent: true) { tx in
            try tx.finalQuery("SELECT \(unescaped: Device.columns) FROM devices").first.map(Device.init(row:))
        }
    }
}
