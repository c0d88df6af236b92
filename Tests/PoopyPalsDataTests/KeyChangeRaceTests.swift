import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// sql/0027–0029 find a device through the key map and then lock or write it by its id. A request with a key whose
/// device was rotated away (or erased) by a transaction that committed while the request waited for the device's
/// lock must then find no device, as a lookup by key did before: it must not register, rotate or erase the device
/// now known by the new key. Found in review; each test failed before the functions checked the key again.
@Suite("A key changed while a request waits", .serialized)
struct KeyChangeRaceTests {
    /// Holds device `key`'s row locked in a superuser transaction, runs `request` meanwhile (it waits for the lock),
    /// then moves the device to a new key as a rotation does and commits: `request` resumes after the move.
    static func whileRotated<T: Sendable>(_ db: TestDatabase, _ key: DeviceID,
                                          _ request: @escaping @Sendable () async throws -> T) async throws -> T {
        var id = UUID()
        return try await whileHeld(db, hold: { conn in
            // By its id, as the functions lock it (on Citus a locking read must name the distribution column).
            id = try conn.query("SELECT id FROM device_key_map WHERE key = \(key.key)")[0].decode(0, as: UUID.self)
            try conn.query("SELECT id FROM devices WHERE id = \(id) FOR UPDATE")
        }, release: { conn in
            let moved = UUID()
            try conn.query("UPDATE devices SET key = \(moved) WHERE id = \(id)")
            try conn.query("UPDATE device_key_map SET key = \(moved) WHERE id = \(id)")
        }, request)
    }

    /// Runs `hold` in a superuser transaction, then `request` (it waits for a lock `hold` took), then `release` and
    /// COMMIT: `request` resumes after what the transaction did.
    static func whileHeld<T: Sendable>(_ db: TestDatabase, hold: (Connection) throws -> Void, release: (Connection) throws -> Void,
                                       _ request: @escaping @Sendable () async throws -> T) async throws -> T {
        let conn = try Connection(configuration: ConnectionConfiguration(connectionString: try Superuser.url(database: db.name)))
        try conn.executeScript("BEGIN")
        try hold(conn)
        let finished = Locked(false)
        let task = Task {
            defer { finished.withLock { $0 = true } }
            return try await request()
        }
        // Until the request waits for the lock (it waits there until the commit below): a request that came after the
        // transaction would pass without having met the race.
        do {
            try await db.waitUntilSessionsWaitOnALock(unless: { finished.value })
        } catch {
            _ = try? conn.executeScript("ROLLBACK")
            _ = try? await task.value
            throw error
        }
        try release(conn)
        try conn.executeScript("COMMIT")
        return try await task.value
    }

    /// A create's outcome as text: "created: true|false", or the repository's refusal.
    static func create(_ logs: PoopLogRepository, as key: DeviceID) async throws -> String {
        do {
            return "created: \(try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: key).created)"
        } catch let error as RepositoryError {
            return "\(error)"
        }
    }

    /// A device registered with `count` logs, on `database(db)`; closes the pool after `body`.
    static func withDevice(logs count: Int, _ body: @escaping @Sendable (TestDatabase, PoopLogRepository, DeviceID, [PoopLog]) async throws -> Void) async throws {
        try await TestDatabase.withMigrated { db in
            let database = Self.database(db)
            let logs = PoopLogRepository(database: database)
            let key = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: key)
            var made: [PoopLog] = []
            for type in 0..<count { made.append(try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 1 + type % 7), as: key).log) }
            try await body(db, logs, key, made)
            await database.pool.close()
        }
    }

    /// One connection, and lock and statement timeouts of 25 s, not the default 2 s lock timeout: under the whole
    /// suite's load the request once gave up its wait before this test had seen it wait.
    static func database(_ db: TestDatabase) -> Database {
        Database(pool: db.pool(size: 1), timeouts: RequestTimeouts(statement: .seconds(25), lock: .seconds(25)))
    }

    @Test func aRegistrationWithTheOldKeyMakesANewDevice() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Self.database(db)
            let devices = DeviceRepository(database: database)
            let key = try DeviceID(UUID())
            _ = try await devices.register(DeviceInfo(model: "first"), as: key)
            let registration = try await Self.whileRotated(db, key) {
                try await devices.register(DeviceInfo(model: "second"), as: key)
            }
            #expect(registration.created)
            #expect(try await Superuser.column("SELECT model FROM devices ORDER BY created_at", in: db.name) == ["first", "second"])
            await database.pool.close()
        }
    }

    @Test func anErasureWithTheOldKeyErasesNothing() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Self.database(db)
            let devices = DeviceRepository(database: database)
            let key = try DeviceID(UUID())
            _ = try await devices.register(DeviceInfo(model: "kept"), as: key)
            let erasure = try await Self.whileRotated(db, key) { try await devices.erase(as: key) }
            #expect(erasure == nil)
            #expect(try await Superuser.column("SELECT count(*)::text FROM devices WHERE erasing_since IS NULL", in: db.name) == ["1"])
            await database.pool.close()
        }
    }

    @Test func aRotationWithTheOldKeyFindsNoDevice() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Self.database(db)
            let devices = DeviceRepository(database: database)
            let key = try DeviceID(UUID())
            _ = try await devices.register(DeviceInfo(model: "kept"), as: key)
            let outcome = try await Self.whileRotated(db, key) { () async throws -> String in
                do {
                    _ = try await devices.rotate(as: key, to: try DeviceID(UUID()))
                    return "rotated"
                } catch let error as RepositoryError {
                    return "\(error)"
                }
            }
            #expect(outcome == "\(RepositoryError.deviceNotRegistered)")
            #expect(try await Superuser.column("SELECT count(*)::text FROM device_key_map", in: db.name) == ["1"])
            await database.pool.close()
        }
    }

    /// A write of the old key that waited for the rotation's lock (its kept id checked before the move) was stored
    /// with no change number: the log trigger numbers a change by updating the device row under the request's key,
    /// found no row after the move, and let the log through with change_seq 0, which the insert's policy (reading the
    /// map as the statement began) still allowed. The phone was told 201, no sync carried the log, the device's log
    /// count missed it (DataRightsTests' four writers met the same window as a 500). Now refused as any write of a key
    /// that stands for no device.
    @Test func aCreateWithTheOldKeyIsRefusedNotStoredWithoutAChangeNumber() async throws {
        try await Self.withDevice(logs: 1) { db, logs, key, _ in
            let outcome = try await Self.whileRotated(db, key) { try await Self.create(logs, as: key) }
            #expect(outcome == "\(RepositoryError.deviceNotRegistered)")
            #expect(try await Superuser.column("""
                SELECT count(*) || ' logs, ' || count(*) FILTER (WHERE change_seq = 0) || ' unnumbered' FROM poop_logs
                """, in: db.name) == ["1 logs, 0 unnumbered"])
            #expect(try await Superuser.column("SELECT log_count::text FROM devices", in: db.name) == ["1"])
        }
    }

    /// The same for a delete: the row went without its tombstone, so the device's other phone never learned of it.
    @Test func aDeleteWithTheOldKeyIsRefusedNotDoneWithoutATombstone() async throws {
        try await Self.withDevice(logs: 1) { db, logs, key, made in
            let deleted = try await Self.whileRotated(db, key) { try await logs.delete(made[0].id, as: key) }
            #expect(!deleted)
            #expect(try await Superuser.column("""
                SELECT (SELECT count(*) FROM poop_logs) || ' logs, ' || (SELECT count(*) FROM poop_log_tombstones) || ' tombstones'
                """, in: db.name) == ["1 logs, 0 tombstones"])
        }
    }

    /// The same for a change: applied with the log's old change number, so no sync carried it.
    @Test func aChangeWithTheOldKeyIsRefusedNotAppliedUnnumbered() async throws {
        try await Self.withDevice(logs: 1) { db, logs, key, made in
            let changed = try await Self.whileRotated(db, key) { try await logs.update(made[0].id, PoopLogPatch(bristolType: 5), as: key) }
            #expect(changed == nil)
            #expect(try await Superuser.column("SELECT bristol_type || '/' || change_seq FROM poop_logs", in: db.name) == ["1/1"])
        }
    }

    /// The same when the device's erasure begins while the write waits: its first call (the real function, in a
    /// transaction held open as the service's request holds it) stops the device and deletes a batch of its logs.
    /// The write was stored unnumbered into the device being erased; now it is refused as a write of a key that
    /// stands for no device.
    @Test func aCreateWhileTheDeviceBeginsToBeErasedIsRefused() async throws {
        try await Self.withDevice(logs: 3) { db, logs, key, _ in
            let outcome = try await Self.whileHeld(db, hold: { conn in
                try conn.query("SELECT set_config('role', poopypals_service_role(), true), set_config('app.device_id', \(key.key.uuidString.lowercased()), true)")
                #expect(try conn.query("SELECT logs_remaining FROM poopypals_erase_device(NULL, 1)")[0].decode(0, as: Int64.self) == 2)
            }, release: { _ in }, { try await Self.create(logs, as: key) })
            #expect(outcome == "\(RepositoryError.deviceNotRegistered)")
            #expect(try await Superuser.column("""
                SELECT count(*) || ' logs, ' || count(*) FILTER (WHERE change_seq = 0) || ' unnumbered' FROM poop_logs
                """, in: db.name) == ["2 logs, 0 unnumbered"])
        }
    }

    /// The key moved after the request's context statement checked its kept id and before its write began (the two
    /// are statements of one round trip, each with its own snapshot): the write met the policy with the key standing
    /// for no device, 42501, a 500 to the phone. Now the write says the kept id is stale (PPD01): the request looks the
    /// key up again and finds no device.
    @Test func aWriteWhoseKeyMovesAfterItsCheckSaysTheKeptIdIsStale() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Self.database(db)
            let key = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: key)
            _ = try await PoopLogRepository(database: database).create(NewPoopLog(occurredAt: Date(), bristolType: 3), as: key)
            let superuserURL = try Superuser.url(database: db.name)
            let failures = Locked<[String]>([])
            let named = try await database.asDevice(key, idempotent: true) { tx -> UUID? in
                guard let stored = try tx.storedID() else { return nil }
                _ = try tx.query("SELECT 1")  // the context and the kept id's check: the id is the key's
                if failures.value.isEmpty {
                    let moved = UUID()
                    let superuser = try Connection(configuration: ConnectionConfiguration(connectionString: superuserURL))
                    try superuser.executeScript("BEGIN")
                    try superuser.query("UPDATE devices SET key = \(moved) WHERE id = \(stored)")
                    try superuser.query("UPDATE device_key_map SET key = \(moved) WHERE id = \(stored)")
                    try superuser.executeScript("COMMIT")
                }
                do {
                    _ = try tx.finalQuery(PostgresQuery(unsafeSQL: PoopLogRepository.createStatement,
                                                        binds: [UUID(), stored, Date(), 2, nil as String?]))
                } catch {
                    failures.withLock { $0.append(PostgresError.find(in: error)?.sqlState.rawValue ?? "\(error)") }
                    throw error
                }
                return stored
            }
            #expect(named == nil)
            #expect(failures.value == ["PPD01"])
            #expect(try await Superuser.column("SELECT count(*)::text FROM poop_logs", in: db.name) == ["1"])
            await database.pool.close()
        }
    }

    /// A key taken and its erasure begun between a registration's check and its write (`KeyTakenAndErased`): "being
    /// erased". On one PostgreSQL `devices.key`'s unique key would also refuse the second device; the test on Citus
    /// (`CitusTests+Races.swift`), where it does not, is the one that failed without the second look.
    @Test func aRegistrationOfAKeyTakenAndErasedMeanwhileSaysBeingErased() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Self.database(db)
            try await KeyTakenAndErased.registration(database, superuser: try Superuser.url(database: db.name)) { finished in
                try await db.waitUntilSessionsWaitOnALock(unless: finished)
            }
            await database.pool.close()
        }
    }

    /// The same for a rotation to that key: "in use".
    @Test func aRotationToAKeyTakenAndErasedMeanwhileSaysInUse() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Self.database(db)
            try await KeyTakenAndErased.rotation(database, superuser: try Superuser.url(database: db.name)) { finished in
                try await db.waitUntilSessionsWaitOnALock(unless: finished)
            }
            await database.pool.close()
        }
    }
}
