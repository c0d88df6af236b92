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
        let conn = try Connection(configuration: ConnectionConfiguration(connectionString: try Superuser.url(database: db.name)))
        try conn.executeScript("BEGIN")
        // By its id, as the functions lock it (on Citus a locking read must name the distribution column).
        let id = try conn.query("SELECT id FROM device_key_map WHERE key = \(key.key)")[0].decode(0, as: UUID.self)
        try conn.query("SELECT id FROM devices WHERE id = \(id) FOR UPDATE")
        let finished = Locked(false)
        let task = Task {
            defer { finished.withLock { $0 = true } }
            return try await request()
        }
        // Until the request waits for the lock (it waits there until the commit below): a request that came after the
        // move would pass without having met the race.
        do {
            try await db.waitUntilSessionsWaitOnALock(unless: { finished.value })
        } catch {
            _ = try? conn.executeScript("ROLLBACK")
            _ = try? await task.value
            throw error
        }
        let moved = UUID()
        try conn.query("UPDATE devices SET key = \(moved) WHERE id = \(id)")
        try conn.query("UPDATE device_key_map SET key = \(moved) WHERE id = \(id)")
        try conn.executeScript("COMMIT")
        return try await task.value
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
