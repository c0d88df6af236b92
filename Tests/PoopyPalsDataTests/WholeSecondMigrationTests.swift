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
            let database = Database(pool: db.pool(size: 2))
            // Registered as the service did at that version (the device's id was its key).
            try await database.asDevice(device) { tx in try tx.finalQuery("INSERT INTO devices (id) VALUES (\(device.key))") }
            let (fractional, whole) = (UUID(), UUID())
            let before = try await database.asDevice(device) { tx in
                try tx.query("""
                    INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type) VALUES
                    (\(fractional), \(device.key), '2026-01-01 10:00:00.999999+00', 3),
                    (\(whole), \(device.key), '2026-01-01 11:00:00+00', 3)
                    """)
                return try tx.finalQuery("SELECT max(change_seq) FROM poop_logs")[0].decode(0, as: Int64.self)
            }
            await database.pool.close()
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
