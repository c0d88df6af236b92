import Foundation
import PostgresClient

/// Everything stored for the calling device, read from one consistent snapshot and handed over in bounded
/// batches as it is read, so that exporting a device of any size costs the service a bounded amount of memory.
public struct DeviceExport: Sendable {
    /// One piece of an export, in order: the header once, then the logs, oldest first, in batches.
    public enum Part: Sendable {
        /// `profile` only for `profileOwner`; `profileLinked` says whether the device has one at all.
        case header(device: Device, profile: User?, profileLinked: Bool)
        case logs([PoopLog])
    }

    let database: Database
    /// Logs per batch: a round trip per batch, and the most rows held at once.
    public let batchSize: Int

    public init(database: Database, batchSize: Int = 500) {
        self.database = database
        self.batchSize = max(1, min(batchSize, 10_000))
    }

    /// Reads the export and calls `consume` with each part on the connection's thread. `consume` may block
    /// (to wait for a slow reader) and may throw to stop; the transaction is then rolled back.
    /// - Returns: false when the device is not registered (then `consume` was never called).
    /// - Throws: what `consume` throws; `PostgresError` otherwise.
    /// The profile's fields are exported only for `profileOwner`, the subject the caller proved with a token: the
    /// device id alone does not reveal who the person is.
    public func run(as device: DeviceID, consistency: ConsistencyToken? = nil, profileOwner: UUID? = nil,
                    _ consume: @escaping @Sendable (Part) throws -> Void) async throws -> Bool {
        let fetch = ("FETCH \(unescaped: String(batchSize)) FROM poopypals_export" as PostgresQuery).withBinaryResults()
        return try await database.asDevice(device, snapshot: true, consistency: consistency) { tx in
            // REPEATABLE READ: the device, its profile and every batch of the cursor see the same state.
            // Named by its stored id (nil: not registered, and nothing is read).
            guard let stored = try tx.storedID(),
                  let deviceRow = try tx.query("SELECT \(unescaped: Device.columns) FROM devices WHERE id = \(stored)").first else {
                return false
            }
            let profile = try tx.query("""
                SELECT \(unescaped: User.columns) FROM users WHERE id = (SELECT d.user_id FROM devices d WHERE d.id = \(stored))
                """).first.map(User.init(row:))
            let exported = try Device(row: deviceRow, id: device)
            try consume(.header(device: exported, profile: profile.flatMap { $0.id == profileOwner ? $0 : nil },
                                profileLinked: exported.userID != nil))
            try tx.query("""
                DECLARE poopypals_export NO SCROLL CURSOR FOR
                SELECT \(unescaped: PoopLog.columns) FROM poop_logs WHERE device_id = \(stored) ORDER BY occurred_at, id
                """)
            while true {
                let rows = try tx.query(fetch)
                if rows.isEmpty { break }
                try consume(.logs(try PoopLog.decode(rows, of: rows)))
                if rows.count < batchSize { break }
            }
            return true
        }
    }
}
