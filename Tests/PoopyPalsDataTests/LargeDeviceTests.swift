import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// Issue 41, item 4: whoever holds a leaked id could push ~300 000 logs, after which the owner could never rotate
/// it away (rotation rewrote every log of the device under the 5 s statement limit) and soon never erase it.
/// A device's size must not decide whether it can be rotated or erased. A million rows take a core for a minute:
/// `make test` runs this suite alone, after the others (scripts/test.sh), so that it disturbs no timing test.
@Suite("A device with a million logs")
struct LargeDeviceTests {
    static let logs = 1_000_000

    @Test func rotatesWithoutRewritingALogAndErasesToTheEnd() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let devices = DeviceRepository(database: database)
            let device = try DeviceID(UUID())
            _ = try await devices.register(DeviceInfo(model: "big"), as: device)
            try await db.seedLogs(deviceKey: device.key, count: Self.logs)

            let newID = try DeviceID(UUID())
            let clock = ContinuousClock()
            let started = clock.now
            let rotated = try await devices.rotate(as: device, to: newID)
            print("rotating a device with \(Self.logs) logs took \((clock.now - started).formatted(.units(allowed: [.milliseconds])))")
            #expect(rotated.info.model == "big")
            // Every log is still the row the seeding wrote (one transaction's xmin): none was rewritten.
            let versions = try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('app.device_id', \(newID.key.uuidString.lowercased()), true)")
                    return try conn.query("SELECT count(*) AS logs, count(DISTINCT xmin::text) AS writers FROM poop_logs")[0]
                }
            }
            #expect(try versions.decode("logs", as: Int.self) == Self.logs)
            #expect(try versions.decode("writers", as: Int.self) == 1)
            #expect(try await devices.current(as: device) == nil)

            // Erasure: the first call stops the device at once and deletes a batch; the rest goes in batches.
            let first = try #require(try await devices.erase(as: newID))
            #expect(first.logs == Int64(DeviceRepository.erasureBatch))
            #expect(first.logsRemaining == Int64(Self.logs - DeviceRepository.erasureBatch))
            #expect(try await devices.current(as: newID) == nil)
            await #expect(throws: RepositoryError.deviceNotRegistered) {
                try await PoopLogRepository(database: database).create(NewPoopLog(occurredAt: Date(), bristolType: 3), as: newID)
            }
            #expect(try await PoopLogRepository(database: database).list(as: newID).items.isEmpty)
            await #expect(throws: RepositoryError.deviceBeingErased) {
                try await devices.register(DeviceInfo(model: "again"), as: newID)
            }
            let other = try DeviceID(UUID())
            _ = try await devices.register(DeviceInfo(model: "other"), as: other)
            await #expect(throws: RepositoryError.deviceIDInUse) { try await devices.rotate(as: other, to: newID) }
            #expect(try await devices.erase(as: other)?.logsRemaining == 0)
            // A repeat reports progress.
            let second = try #require(try await devices.erase(as: newID))
            #expect(second.logsRemaining == Int64(Self.logs - 2 * DeviceRepository.erasureBatch))

            let erasing = clock.now
            let done = try await PendingErasures(database: database).run(maxBatches: 1_000, until: .now + .seconds(600))
            print("erasing the rest (\(done.logsErased) logs in \(done.batches) batches) took \((clock.now - erasing).formatted(.units(allowed: [.seconds, .milliseconds])))")
            #expect(done.devicesErasing == 0)
            #expect(done.logsErased == Int64(Self.logs - 2 * DeviceRepository.erasureBatch))
            let left = try await Superuser.column("SELECT (SELECT count(*) FROM poop_logs) + (SELECT count(*) FROM devices) + (SELECT count(*) FROM poop_log_tombstones)", in: db.name)
            #expect(left == ["0"])
            #expect(try await devices.erase(as: newID) == nil)
            // The id is free again: registering it makes a new, empty device.
            #expect(try await devices.register(DeviceInfo(model: "again"), as: newID).created)
            #expect(try await PoopLogRepository(database: database).list(as: newID).items.isEmpty)
            await database.pool.close()
        }
    }

}

/// The stable internal id and the key column (sql/0020, 0021): the migration on a database in use, and finishing
/// erasures from the tools.
@Suite("Stable device ids")
struct StableDeviceIDTests {
    /// sql/0020 and 0021 on a database in use: no log is rewritten (a device's logs keep pointing at the same
    /// value, now its stable id), the phone keeps its id and its sync cursor, and rotating afterwards moves nothing.
    @Test func theMigrationToStableIDsRewritesNoLogAndKeepsEveryCursor() async throws {
        try await TestDatabase.with { db in
            let files = try MigrationFile.load(directory: TestProject.migrationsDirectory)
            let options = { var options = Migrator.Options(); options.target = 19; return options }()
            try await db.withConnection { _ = try Migrator(files: files, options: options).migrate(on: $0) }
            let device = try DeviceID(UUID())
            let (kept, deleted, later) = (UUID(), UUID(), UUID())
            // What the service did at version 19: the shared service role, the device's id its key.
            let cursor = try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('role', 'poopypals_app', true), set_config('app.device_id', \(device.key.uuidString.lowercased()), true)")
                    try conn.query("INSERT INTO devices (id, model) VALUES (\(device.key), 'old phone')")
                    for log in [kept, deleted] {
                        try conn.query("INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type) VALUES (\(log), \(device.key), now(), 4)")
                    }
                    try conn.query("DELETE FROM poop_logs WHERE id = \(deleted)")
                    return try conn.query("SELECT change_seq FROM devices")[0].decode(0, as: Int64.self)
                }
            }
            let versions = { @Sendable () async throws -> [String] in
                try await Superuser.column("SELECT xmin::text || ' ' || ctid::text FROM poop_logs ORDER BY id", in: db.name)
            }
            let before = try await versions()
            try await db.withConnection { _ = try Migrator(files: files).migrate(on: $0) }
            #expect(try await versions() == before)

            let database = Database(pool: db.pool(size: 2))
            let sync = SyncRepository(database: database)
            let upToDate = SyncCursor(sequence: cursor).encoded
            #expect(try await DeviceRepository(database: database).current(as: device)?.info.model == "old phone")
            #expect(try await sync.pull(cursor: upToDate, limit: 10, as: device).changes.isEmpty)
            let rotated = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).rotate(as: device, to: rotated)
            #expect(try await versions() == before)
            #expect(try await sync.pull(cursor: upToDate, limit: 10, as: rotated).changes.isEmpty)
            _ = try await PoopLogRepository(database: database).create(NewPoopLog(id: later, occurredAt: Date(), bristolType: 3), as: rotated)
            func described(_ changes: [SyncChange]) -> [String] {
                changes.map { change in
                    switch change {
                    case .upsert(let log): "upsert \(log.id)"
                    case .delete(let id): "delete \(id)"
                    }
                }
            }
            #expect(described(try await sync.pull(cursor: upToDate, limit: 10, as: rotated).changes) == ["upsert \(later)"])
            let everything = described(try await sync.pull(cursor: nil, limit: 10, as: rotated).changes)
            #expect(everything == ["upsert \(kept)", "delete \(deleted)", "upsert \(later)"])
            await database.pool.close()
        }
    }

    /// The cron job finishes what an erasure left, as the service does in the background.
    @Test func maintenanceFinishesErasuresUnderWay() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let devices = DeviceRepository(database: database)
            let (big, small) = (try DeviceID(UUID()), try DeviceID(UUID()))
            for device in [big, small] { _ = try await devices.register(DeviceInfo(model: "phone"), as: device) }
            try await db.seedLogs(deviceKey: big.key, count: 12_345)
            try await db.seedLogs(deviceKey: small.key, count: 10)
            #expect(try await devices.erase(as: big, batch: 1_000)?.logsRemaining == 11_345)
            await database.pool.close()

            let run = try await TestProject.run(["maintenance", "--database-url", db.url])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("Erasures: 11345 logs deleted; 0 devices still being erased."), "\(run.stdout)")
            // Only the erased device's logs went.
            let left = try await Superuser.column("SELECT count(*) FROM poop_logs", in: db.name)
            #expect(left == ["10"])
        }
    }
}
