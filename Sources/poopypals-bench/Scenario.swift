import Foundation
import PoopyPalsData
import PostgresClient

/// One thing a request does, done by our data layer and, as SQL, by pgbench.
struct Scenario: Sendable {
    let name: String
    /// pgbench's script: the same statements, pipelined.
    let pgbenchScript: String
    /// One request through our data layer.
    let ours: @Sendable (Database, DeviceID) async throws -> Void

    /// Device n of the seeded set, in the form pgbench can build from a number as well.
    static func device(_ number: Int) -> DeviceID {
        let digits = String(number)
        // swiftlint:disable:next force_try
        return try! DeviceID(validating: "00000000-0000-4000-8000-" + String(repeating: "0", count: 12 - digits.count) + digits)
    }

    static let pgbenchDevice = "'00000000-0000-4000-8000-' || lpad(:n::text, 12, '0')"

    static func all(devices: Int) -> [Scenario] {
        [
            Scenario(
                name: "create log",
                pgbenchScript: """
                    \\set n random(1, \(devices))
                    \\startpipeline
                    BEGIN;
                    SELECT set_config('role', 'poopypals_app', true), set_config('app.device_id', \(pgbenchDevice), true);
                    INSERT INTO poop_logs (device_id, occurred_at, bristol_type) VALUES ((\(pgbenchDevice))::uuid, now(), 4);
                    COMMIT;
                    \\endpipeline
                    """,
                ours: { database, device in
                    _ = try await database.asDevice(device) { tx in
                        try tx.finalQuery("""
                            INSERT INTO poop_logs (device_id, occurred_at, bristol_type) VALUES (\(device.uuid), now(), 4)
                            """)
                    }
                }
            ),
        ]
    }
}
