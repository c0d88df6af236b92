import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// A registration of a new key, and a rotation to a new key, first check that the key is free (in no map row, of no
/// device being erased) and then write the key map. Between the two, another device can take the key and begin its
/// erasure, both committed. The request must then answer "being erased" (registration) or "in use" (rotation), and
/// not give the key a second device. On one PostgreSQL `devices.key`'s unique key also closes this; on Citus, where
/// the only unique key of `devices` is its id (the distribution column), only the functions' second look at the
/// erasing keys, once the map's row is theirs, does (sql/0033 for registration, sql/0034 for rotation).
///
/// To meet the race every time, a superuser transaction does both (the key's map row and device, then the erasure's
/// delete of that row and the key's erasing row) and holds them: the request's check sees neither, and its write of
/// the map waits for the holder. The holder commits once the request is seen waiting; the write then goes on.
enum KeyTakenAndErased {
    /// Runs `request` while a device of `key` is registered and its erasure begun in a superuser transaction (`url`),
    /// committed once `waitingSeen` returns: it returns when the request waits on a lock, and throws when it does
    /// not, or when `finished` says the request ended without having waited.
    static func meanwhile<T: Sendable>(
        superuser url: String, key: DeviceID,
        waitingSeen: @escaping @Sendable (_ finished: @escaping @Sendable () -> Bool) async throws -> Void,
        _ request: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let conn = try Connection(configuration: ConnectionConfiguration(connectionString: url))
        let id = UUID()
        try conn.executeScript("BEGIN")
        try conn.query("INSERT INTO device_key_map (key, id) VALUES (\(key.key), \(id))")
        try conn.query("INSERT INTO devices (id, key, model, erasing_since) VALUES (\(id), \(key.key), 'taken', now())")
        try conn.query("DELETE FROM device_key_map WHERE id = \(id)")
        try conn.query("INSERT INTO erasing_device_keys (id, key, since) VALUES (\(id), \(key.key), now())")
        let finished = Locked(false)
        let task = Task {
            defer { finished.withLock { $0 = true } }
            return try await request()
        }
        do {
            try await waitingSeen({ finished.value })
        } catch {
            _ = try? conn.executeScript("ROLLBACK")
            _ = try? await task.value
            throw error
        }
        try conn.executeScript("COMMIT")
        return try await task.value
    }

    /// A new key's registration meets it: "being erased", and the key keeps its one device.
    static func registration(_ database: Database, superuser url: String,
                             waitingSeen: @escaping @Sendable (_ finished: @escaping @Sendable () -> Bool) async throws -> Void) async throws {
        let devices = DeviceRepository(database: database)
        let key = try DeviceID(UUID())
        let outcome = try await meanwhile(superuser: url, key: key, waitingSeen: waitingSeen) { () async throws -> String in
            do {
                return try await devices.register(DeviceInfo(model: "second"), as: key).created ? "created" : "updated"
            } catch let error as RepositoryError {
                return "\(error)"
            }
        }
        #expect(outcome == "\(RepositoryError.deviceBeingErased)")
        #expect(try count(url, "SELECT count(*) FROM devices WHERE key = $1", key) == 1)
        #expect(try count(url, "SELECT count(*) FROM device_key_map WHERE key = $1", key) == 0)
    }

    /// A live device's rotation to the key meets it: "in use", and the device stays under its own key.
    static func rotation(_ database: Database, superuser url: String,
                         waitingSeen: @escaping @Sendable (_ finished: @escaping @Sendable () -> Bool) async throws -> Void) async throws {
        let devices = DeviceRepository(database: database)
        let (live, key) = (try DeviceID(UUID()), try DeviceID(UUID()))
        #expect(try await devices.register(DeviceInfo(model: "live"), as: live).created)
        let outcome = try await meanwhile(superuser: url, key: key, waitingSeen: waitingSeen) { () async throws -> String in
            do {
                _ = try await devices.rotate(as: live, to: key)
                return "rotated"
            } catch let error as RepositoryError {
                return "\(error)"
            }
        }
        #expect(outcome == "\(RepositoryError.deviceIDInUse)")
        #expect(try await devices.current(as: live)?.info.model == "live")
        #expect(try count(url, "SELECT count(*) FROM devices WHERE key = $1", key) == 1)
        #expect(try count(url, "SELECT count(*) FROM device_key_map WHERE key = $1", key) == 0)
    }

    static func count(_ url: String, _ sql: String, _ key: DeviceID) throws -> Int {
        let conn = try Connection(configuration: ConnectionConfiguration(connectionString: url))
        return try conn.query(PostgresQuery(unsafeSQL: sql, binds: [key.key]))[0].decode(0, as: Int.self)
    }
}
