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
            // Generous limits: it runs beside the client's build and the fuzzer, and what it proves is that nothing is
            // rewritten (counts, xmin), not how fast a 5 000-log erasure batch of a million-log device runs.
            let database = Database(pool: db.pool(size: 2), timeouts: RequestTimeouts(statement: .seconds(120), lock: .seconds(60)))
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
