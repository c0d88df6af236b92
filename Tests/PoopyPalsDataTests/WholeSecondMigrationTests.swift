import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

@Suite("sql/0011: log times to the whole second")
struct WholeSecondMigrationTests {
    @Test func existingFractionalTimesAreRoundedDownAndPulledAgainBySync() async throws {
        try await TestDatabase.with { db in
            let files = try MigrationFile.load(directory: TestProject.migrationsDirectory)
            let options = { var options = Migrator.Options(); options.target = 10; return options }()
            try await db.withConnection { _ = try Migrator(files: files, options: options).migrate(on: $0) }
            let device = try DeviceID(UUID())
            let (fractional, whole) = (UUID(), UUID())
            // Registered and written as the service did at that version: the shared service role, the device's id
            // its key.
            let before = try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('role', 'poopypals_app', true), set_config('app.device_id', \(device.key.uuidString.lowercased()), true)")
                    try conn.query("INSERT INTO devices (id) VALUES (\(device.key))")
                    try conn.query("""
                        INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type) VALUES
                        (\(fractional), \(device.key), '2026-01-01 10:00:00.999999+00', 3),
                        (\(whole), \(device.key), '2026-01-01 11:00:00+00', 3)
                        """)
                    return try conn.query("SELECT max(change_seq) FROM poop_logs")[0].decode(0, as: Int64.self)
                }
            }
            try await db.withConnection { _ = try Migrator(files: files).migrate(on: $0) }

            let check = Database(pool: db.pool(size: 1))
            let rows = try await check.asDevice(device) { tx in
                try tx.finalQuery("SELECT id, occurred_at::text AS at, change_seq FROM poop_logs ORDER BY occurred_at").map {
                    (try $0.decode("id", as: UUID.self), try $0.decode("at", as: String.self), try $0.decode("change_seq", as: Int64.self))
                }
            }
            await check.pool.close()
            #expect(rows.map(\.1) == ["2026-01-01 10:00:00+00", "2026-01-01 11:00:00+00"])
            // The rounded log is a change (a phone pulls the new value); the other is untouched.
            #expect(rows.first { $0.0 == fractional }.map { $0.2 > before } == true)
            #expect(rows.first { $0.0 == whole }.map { $0.2 <= before } == true)
        }
    }
}
