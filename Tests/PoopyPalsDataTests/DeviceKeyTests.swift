import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// sql/0010: the database holds keys of device ids, never the ids.
@Suite("Device keys, rotation, erasure and export in the data layer")
struct DeviceKeyTests {
    /// Computed independently: python3 -c "import hashlib, uuid; print(uuid.UUID(bytes=hashlib.sha256(
    /// b'poopypals.device.v1:6f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3f').digest()[:16]))"
    static let vectorID = "6F1C0A4E-3B2D-4C5E-9F70-8A9B0C1D2E3F"
    static let vectorKey = "f5f0b82f-651c-d77b-6b9f-8bf348e6c2c6"

    @Test func swiftAndSQLDeriveThePinnedKey() async throws {
        let id = try #require(UUID(uuidString: Self.vectorID))
        #expect(DeviceID.key(of: id).uuidString.lowercased() == Self.vectorKey)
        #expect(try DeviceID(validating: Self.vectorID.lowercased()).key == DeviceID.key(of: id))
        try await TestDatabase.withMigrated { db in
            let ids = [id] + (0..<50).map { _ in UUID() }
            let sqlKeys = try await db.withConnection { conn in
                try ids.map { try conn.query("SELECT poopypals_device_key(\($0))")[0].decode(0, as: UUID.self) }
            }
            #expect(sqlKeys == ids.map(DeviceID.key(of:)))
        }
    }

    @Test func onlyRandomVersion4IDsAreStrong() throws {
        #expect(DeviceID.isStrong(UUID()))
        for weak in ["6f1c0a4e-3b2d-11ef-9f70-8a9b0c1d2e3f",  // version 1 (time-based)
                     "6f1c0a4e-3b2d-7c5e-9f70-8a9b0c1d2e3f",  // version 7
                     "6f1c0a4e-3b2d-4c5e-cf70-8a9b0c1d2e3f",  // version 4 digit, but not the RFC variant
                     "00000000-0000-0000-0000-000000000000"] {
            #expect(!DeviceID.isStrong(try #require(UUID(uuidString: weak))), "\(weak)")
        }
    }

    /// A phone that registered before the upgrade keeps working with the same id: its device, logs,
    /// tombstones and profile link, written under 0009 with the id itself, are reached by that id after 0010.
    @Test func rowsWrittenBeforeTheKeyMigrationAreReachableByTheirOldID() async throws {
        try await TestDatabase.with { db in
            let options = { var options = Migrator.Options(); options.target = 9; return options }()
            let files = try MigrationFile.load(directory: TestProject.migrationsDirectory)
            try await db.withConnection { _ = try Migrator(files: files, options: options).migrate(on: $0) }
            let (id, user) = (UUID(), UUID())
            let (kept, deleted) = (UUID(), UUID())
            try await db.withConnection { conn in
                try conn.transaction { conn in
                    // What the service did before 0010: app.device_id was the id itself.
                    try conn.query("SELECT set_config('role', 'poopypals_app', true), set_config('app.device_id', \(id.uuidString), true)")
                    try conn.query("INSERT INTO devices (id, model) VALUES (\(id), 'old phone')")
                    for log in [kept, deleted] {
                        try conn.query("INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type) VALUES (\(log), \(id), now(), 4)")
                    }
                    try conn.query("DELETE FROM poop_logs WHERE id = \(deleted)")
                    try conn.query("SELECT * FROM poopypals_ensure_profile(\(user), 'old@example.com', false, NULL, false, NULL)")
                }
            }
            try await db.withConnection { _ = try Migrator(files: files).migrate(on: $0) }

            let database = Database(pool: db.pool(size: 2))
            let device = try DeviceID(id)
            let found = try await DeviceRepository(database: database).current(as: device)
            #expect(found?.id == id && found?.userID == user && found?.info.model == "old phone")
            #expect(try await PoopLogRepository(database: database).list(as: device).items.map(\.id) == [kept])
            let changes = try await SyncRepository(database: database).pull(cursor: nil, limit: 10, as: device).changes
            #expect(changes.count == 2)
            #expect(try await UserRepository(database: database).find(id: user, as: device)?.email == "old@example.com")
            // Nothing answers to the id itself any more: only its key.
            let (byID, byKey) = try await db.withConnection { conn in
                try conn.transaction { conn in
                    let byID = try conn.query("SELECT count(*)::int FROM devices d WHERE d.id = \(id)")[0].decode(0, as: Int.self)
                    try conn.query("SELECT set_config('app.device_id', \(id.deviceKey.uuidString), true)")
                    return (byID, try conn.query("SELECT count(*)::int FROM poop_logs")[0].decode(0, as: Int.self))
                }
            }
            #expect(byID == 0 && byKey == 1)
            await database.pool.close()
        }
    }

    /// A SECURITY DEFINER function anyone may call runs with its owner's rights for anyone: the audit says so.
    /// (It found exactly this on PostgreSQL 16+: 0008's REVOKE from PUBLIC had been a silent no-op there.)
    @Test func theAuditFailsASecurityDefinerFunctionThatPublicMayExecute() async throws {
        try await TestDatabase.withMigrated { db in
            let clean = try await db.withConnection { try RLSAudit().run(on: $0) }
            #expect(clean.ok, "\(clean.checks.filter { !$0.ok })")
            // 0026 added devices_keep_key_map(); 0037 registration's second form and the buckets' sweep.
            #expect(clean.checks.filter { $0.check.hasPrefix("SECURITY DEFINER") }.count == 8)
            let report = try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('role', poopypals_profiles_role(), true)")
                    try conn.executeScript("GRANT EXECUTE ON FUNCTION poopypals_erase_device(uuid, integer) TO PUBLIC")
                }
                return try RLSAudit().run(on: conn)
            }
            let failed = report.checks.filter { !$0.ok }
            #expect(failed.count == 1)
            #expect(failed.first?.check.contains("poopypals_erase_device(") == true && failed.first?.problem == "PUBLIC may execute it")
        }
    }

    /// Batches arrive in order and cover every log once, from one snapshot.
    @Test func exportHandsOverEveryLogOldestFirstInBatches() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let device = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(model: "export"), as: device)
            let logs = PoopLogRepository(database: database)
            let base = Date(timeIntervalSince1970: 1_700_000_000)
            for minutes in [30, 10, 50, 20, 40] {
                _ = try await logs.create(NewPoopLog(occurredAt: base + Double(minutes * 60), bristolType: 3), as: device)
            }
            let parts = Locked<[DeviceExport.Part]>([])
            let found = try await DeviceExport(database: database, batchSize: 2).run(as: device) { part in parts.withLock { $0.append(part) } }
            #expect(found)
            var batches: [[PoopLog]] = []
            for (index, part) in parts.value.enumerated() {
                switch part {
                case .header(let exported, let profile, let linked):
                    #expect(index == 0 && exported.id == device.uuid && exported.info.model == "export" && profile == nil && !linked)
                case .logs(let batch):
                    batches.append(batch)
                }
            }
            #expect(batches.map(\.count) == [2, 2, 1])
            let times = batches.joined().map { Int(($0.occurredAt.timeIntervalSince1970 - base.timeIntervalSince1970) / 60) }
            #expect(times == [10, 20, 30, 40, 50])
            // An unknown device: nothing handed over.
            let unknown = try await DeviceExport(database: database).run(as: try DeviceID(UUID())) { _ in Issue.record("called") }
            #expect(!unknown)
            await database.pool.close()
        }
    }
}
