import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// sql/0026: `device_key_map`, what `get_current_device_id()` reads (issue 45, step 1: the lookup a Citus worker can
/// make from a reference table). It holds exactly the devices that are not being erased, whatever changed them, and
/// a device reaches only its own row of it.
@Suite("The device key map")
struct DeviceKeyMapTests {
    /// "key id" of every row of the map, and of every device not being erased (as the superuser sees them).
    static func map(_ db: TestDatabase) async throws -> [String] {
        try await Superuser.column("SELECT m.key || ' ' || m.id FROM device_key_map m ORDER BY 1", in: db.name)
    }
    static func liveDevices(_ db: TestDatabase) async throws -> [String] {
        try await Superuser.column("SELECT d.key || ' ' || d.id FROM devices d WHERE d.erasing_since IS NULL ORDER BY 1", in: db.name)
    }
    /// sql/0033: "key id" of every row of the erasing keys, and of every device being erased.
    static func erasingKeys(_ db: TestDatabase) async throws -> [String] {
        try await Superuser.column("SELECT e.key || ' ' || e.id FROM erasing_device_keys e ORDER BY 1", in: db.name)
    }
    static func erasingDevices(_ db: TestDatabase) async throws -> [String] {
        try await Superuser.column("SELECT d.key || ' ' || d.id FROM devices d WHERE d.erasing_since IS NOT NULL ORDER BY 1", in: db.name)
    }

    @Test func theMapFollowsRegistrationRotationAndErasure() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let devices = DeviceRepository(database: database)
            let logs = PoopLogRepository(database: database)
            let (a, b) = (try DeviceID(UUID()), try DeviceID(UUID()))
            _ = try await devices.register(DeviceInfo(model: "phone"), as: a)
            _ = try await devices.register(DeviceInfo(model: "tablet"), as: b)
            _ = try await devices.register(DeviceInfo(model: "phone 2"), as: a)  // registered again: no key change
            #expect(try await Self.map(db).count == 2)
            #expect(try await Self.map(db) == Self.liveDevices(db))

            // Rotation moves the device's row of the map to the new key; the old key finds nothing.
            let rotated = try DeviceID(UUID())
            _ = try await devices.rotate(as: a, to: rotated)
            #expect(try await Self.map(db) == Self.liveDevices(db))
            #expect(try await Self.map(db).contains { $0.hasPrefix(a.key.uuidString.lowercased()) } == false)
            _ = try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: rotated)
            await #expect(throws: (any Error).self) {
                _ = try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: a)
            }

            // An erasure that does not finish at once: the device row stays, erasing, and its key is gone from the map.
            for _ in 0..<3 { _ = try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 3), as: b) }
            _ = try await devices.erase(as: b, batch: 1)
            #expect(try await Superuser.column("SELECT count(*)::text FROM devices WHERE erasing_since IS NOT NULL", in: db.name) == ["1"])
            #expect(try await Self.map(db) == Self.liveDevices(db))
            #expect(try await Self.map(db).count == 1)
            // sql/0033: its key is in the erasing keys until its last batch, and that is what refuses a registration
            // of it and a rotation to it meanwhile.
            #expect(try await Self.erasingKeys(db).count == 1)
            #expect(try await Self.erasingKeys(db) == Self.erasingDevices(db))
            await #expect(throws: RepositoryError.deviceBeingErased) { _ = try await devices.register(DeviceInfo(model: "again"), as: b) }
            await #expect(throws: RepositoryError.deviceIDInUse) { _ = try await devices.rotate(as: rotated, to: b) }
            #expect(try await devices.erase(as: b, batch: 1)?.logsRemaining == 1)  // continued by its key
            _ = try await PendingErasures(database: database).run(maxBatches: 100, until: .now + .seconds(60))
            #expect(try await Superuser.column("SELECT count(*)::text FROM devices", in: db.name) == ["1"])
            #expect(try await Self.map(db) == Self.liveDevices(db))
            #expect(try await Self.erasingKeys(db).isEmpty)
            #expect(try await devices.register(DeviceInfo(model: "new"), as: b).created)
            await database.pool.close()
        }
    }

    /// sql/0033 on a database with an erasure under way: the migration fills the erasing keys from the devices being
    /// erased (as the profile role: devices' row-level security is forced, and its owner sees no device), and the
    /// erasure goes on. sql/0034 makes them whole again after what calls under way during 0033 could leave.
    @Test func theErasingKeysMigrationKeepsAnErasureUnderWay() async throws {
        try await TestDatabase.with { db in
            let url = ["--database-url", db.url, "--migrations-dir", TestProject.migrationsDirectory.path]
            let before = try await TestProject.run(["migrate", "--target", "32"] + url)
            try #require(before.status == 0, "\(before.stderr)")
            let database = Database(pool: db.pool(size: 2))
            let devices = DeviceRepository(database: database)
            let erasing = try DeviceID(UUID())
            _ = try await devices.register(DeviceInfo(model: "phone"), as: erasing)
            for _ in 0..<3 { _ = try await PoopLogRepository(database: database).create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: erasing) }
            #expect(try await devices.erase(as: erasing, batch: 1)?.logsRemaining == 2)
            let linked = try DeviceID(UUID())
            _ = try await devices.register(DeviceInfo(model: "linked"), as: linked)
            let subject = UUID()
            _ = try await UserRepository(database: database).ensureProfileAndLink(as: linked, id: subject, email: "linked@example.com")
            let filled = try await TestProject.run(["migrate", "--target", "33"] + url)
            try #require(filled.status == 0, "\(filled.stderr)")
            #expect(try await Self.erasingKeys(db) == Self.erasingDevices(db))
            #expect(try await Self.erasingKeys(db).count == 1)

            // What a call of the functions of before 0033, under way while it ran, leaves (sql/0034): an erasure begun
            // without its row, a row of a device no longer there; and a map whose user_id missed a link.
            try await Superuser.execute("DELETE FROM erasing_device_keys",
                                        "INSERT INTO erasing_device_keys (id, key, since) VALUES (gen_random_uuid(), gen_random_uuid(), now())",
                                        "UPDATE device_key_map SET user_id = NULL", in: db.name)
            let after = try await TestProject.run(["migrate"] + url)
            try #require(after.status == 0, "\(after.stderr)")
            #expect(try await Self.erasingKeys(db) == Self.erasingDevices(db))
            #expect(try await Self.erasingKeys(db).count == 1)
            #expect(try await Superuser.column("SELECT user_id::text FROM device_key_map", in: db.name) == [subject.uuidString.lowercased()])
            // sql/0035: the map found by user_id through an index of its own.
            #expect(try await Superuser.column("SELECT indexname::text FROM pg_indexes WHERE indexname = 'device_key_map_user_id'", in: db.name).count == 1)
            await #expect(throws: RepositoryError.deviceBeingErased) { _ = try await devices.register(DeviceInfo(model: "again"), as: erasing) }
            #expect(try await devices.erase(as: erasing, batch: 1)?.logsRemaining == 1)
            _ = try await PendingErasures(database: database).run(maxBatches: 10, until: .now + .seconds(30))
            #expect(try await Self.erasingKeys(db).isEmpty)
            #expect(try await devices.register(DeviceInfo(model: "new"), as: erasing).created)
            await database.pool.close()
        }
    }

    /// sql/0033: an erasure with the profile's subject deletes the profile only with its last linked device, which it
    /// now asks the map (`user_id`, kept with the device's by sql/0028), not every device: a device being erased, and
    /// a device linked to another profile, do not keep it.
    @Test func aProfileGoesWithItsLastLinkedDeviceOnly() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let devices = DeviceRepository(database: database)
            let users = UserRepository(database: database)
            let (a, b, c, d) = (try DeviceID(UUID()), try DeviceID(UUID()), try DeviceID(UUID()), try DeviceID(UUID()))
            let (subject, otherSubject) = (UUID(), UUID())
            for device in [a, b, c, d] { _ = try await devices.register(DeviceInfo(model: "phone"), as: device) }
            for device in [a, b, c] { _ = try await users.ensureProfileAndLink(as: device, id: subject, email: "last@example.com") }
            _ = try await users.ensureProfileAndLink(as: d, id: otherSubject, email: "other@example.com")
            // c's erasure stays under way (a log left), and unlinks it at its start.
            for _ in 0..<2 { _ = try await PoopLogRepository(database: database).create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: c) }
            #expect(try await devices.erase(as: c, subject: subject, batch: 1)?.profileErased == false)
            #expect(try await devices.erase(as: a, subject: subject)?.profileErased == false)
            #expect(try await users.find(id: subject, as: b)?.email == "last@example.com")
            // b is the last live device linked to it; c, still being erased, and d (another profile) do not keep it.
            #expect(try await devices.erase(as: b, subject: subject)?.profileErased == true)
            #expect(try await Superuser.column("SELECT count(*)::text FROM users", in: db.name) == ["1"])
            #expect(try await users.find(id: otherSubject, as: d)?.email == "other@example.com")
            await database.pool.close()
        }
    }

    /// A device reads only its own row of the map and writes none: not even a row for its own key (that would
    /// point the key at a device of its choosing; only the profile role's functions write the map: sql/0027), and it
    /// deletes nothing.
    @Test func aDeviceReadsOnlyItsOwnRowOfTheMapAndWritesNone() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let devices = DeviceRepository(database: database)
            let (a, b) = (try DeviceID(UUID()), try DeviceID(UUID()))
            _ = try await devices.register(DeviceInfo(model: "phone"), as: a)
            _ = try await devices.register(DeviceInfo(model: "tablet"), as: b)
            let seen = try await database.asDevice(a) { tx in
                try tx.finalQuery("SELECT key FROM device_key_map").map { try $0.decode(0, as: UUID.self) }
            }
            #expect(seen == [a.key])
            // A fresh key (not registered) pointing itself at b's internal id, and a registered one adding a row.
            let fresh = try DeviceID(UUID())
            let bID = try await Superuser.column("SELECT id::text FROM devices WHERE key = '\(b.key.uuidString.lowercased())'", in: db.name)
            for (device, id) in [(fresh, bID.first ?? ""), (a, UUID().uuidString)] {
                let forged = await #expect(throws: PostgresError.self) {
                    try await database.asDevice(device) { tx in
                        _ = try tx.finalQuery("INSERT INTO device_key_map (key, id) VALUES (\(device.key), \(id)::uuid)")
                    }
                }
                #expect(forged?.sqlState == "42501")
            }
            for device in [a, b] {
                let deleted = await #expect(throws: PostgresError.self) {
                    try await database.asDevice(a) { tx in
                        _ = try tx.finalQuery("DELETE FROM device_key_map WHERE key = \(device.key)")
                    }
                }
                #expect(deleted?.sqlState == "42501")
            }
            #expect(try await Self.map(db).count == 2)
            await database.pool.close()
        }
    }

    /// sql/0027: registration is a function that takes the key's map row first. Eight registrations of one new key
    /// at once make one device, one map row and one registration token taken, and exactly one says "created"; the
    /// service role itself can neither insert a device nor touch a bucket, and cannot delete its device (which would
    /// leave its map row behind: only erasure removes a device).
    @Test func concurrentRegistrationsOfOneKeyMakeOneDevice() async throws {
        try await TestDatabase.withMigrated { db in
            // Four instances of the service (a device holds two connections of each at most: DeviceSlots). Not more:
            // the whole suite runs at once; in the CI run where this test first held twenty, PostgreSQL 18 refused
            // connections ("too many clients", of 600).
            // The eight queue on one bucket row and one key: the race's outcome is under test, not the 2 s lock wait.
            let instances = (0..<4).map { _ in Database(pool: db.pool(size: 2), timeouts: RequestTimeouts(statement: .seconds(25), lock: .seconds(25))) }
            let device = try DeviceID(UUID())
            let network = NetworkKeys(tokenSecret: "tests").key("v4:192.0.2.7")
            let created = try await withThrowingTaskGroup(of: Bool.self) { group in
                for n in 0..<8 {
                    let devices = DeviceRepository(database: instances[n % 4])
                    group.addTask { try await devices.register(DeviceInfo(model: "phone \(n)"), as: device, network: network).created }
                }
                return try await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(created.count == 8 && created.filter { $0 }.count == 1)
            #expect(try await Self.map(db).count == 1)
            #expect(try await Self.map(db) == Self.liveDevices(db))
            let burst = RateLimits().registrationBurst
            #expect(try await Superuser.column("SELECT round(tokens)::text FROM registration_buckets", in: db.name) == ["\(burst - 1)"])

            for statement: PostgresQuery in [
                "INSERT INTO devices (key, model) VALUES (\(device.key), 'phone')",
                "INSERT INTO registration_buckets (network, tokens, refilled_at) VALUES ('\\x00', 1000, now())",
                "UPDATE registration_buckets SET tokens = 1000",
                "DELETE FROM devices",
            ] {
                let refused = await #expect(throws: PostgresError.self) {
                    try await instances[0].asDevice(device) { tx in _ = try tx.finalQuery(statement) }
                }
                #expect(refused?.sqlState == .insufficientPrivilege)
            }
            for instance in instances { await instance.pool.close() }
        }
    }

    /// `poopypals monitor rls` checks the map as it checks a device's tables: passes as migrated; an open read
    /// policy, a policy that lets a device write, row-level security not forced, or a missing policy fails, named.
    @Test func theRLSAuditChecksTheMap() async throws {
        try await TestDatabase.withMigrated { db in
            let clean = try await db.withConnection { try RLSAudit().run(on: $0) }
            #expect(clean.ok, "\(clean.checks.filter { !$0.ok })")
            #expect(clean.checks.contains { $0.check == "device_key_map: policy \"Profiles keep the key map\"" && $0.ok })
            let report = try await db.withConnection { conn in
                // One statement at a time: Citus sends a DDL statement's text to the nodes, and refuses a text of several.
                for statement in [
                    #"DROP POLICY "Devices can read own key" ON device_key_map"#,
                    #"CREATE POLICY "Devices can read own key" ON device_key_map FOR SELECT USING (key = get_current_device_key() OR true)"#,
                    #"DROP POLICY "Profiles keep the key map" ON device_key_map"#,
                    #"CREATE POLICY "Devices can insert own key" ON device_key_map FOR INSERT WITH CHECK (key = get_current_device_key())"#,
                    "ALTER TABLE device_key_map NO FORCE ROW LEVEL SECURITY",
                ] {
                    try conn.executeScript(statement)
                }
                return try RLSAudit().run(on: conn)
            }
            #expect(!report.ok)
            #expect(report.checks.contains { $0.check == "device_key_map: policy \"Devices can read own key\"" && $0.problem?.contains("USING is") == true })
            #expect(report.checks.contains { $0.check == "device_key_map: policy \"Profiles keep the key map\"" && $0.problem == "missing" })
            #expect(report.checks.contains { $0.check == "device_key_map: no other permissive policies" && !$0.ok })
            #expect(report.checks.contains { $0.check == "device_key_map: row-level security forced" && !$0.ok })
        }
    }

    /// The migration fills the map from the devices registered before it, leaving out one being erased.
    @Test func theMigrationFillsTheMapFromEveryDeviceNotBeingErased() async throws {
        try await TestDatabase.with { db in
            let files = try MigrationFile.load(directory: TestProject.migrationsDirectory)
            let options = { var options = Migrator.Options(); options.target = 25; return options }()
            try await db.withConnection { _ = try Migrator(files: files, options: options).migrate(on: $0) }
            let database = Database(pool: db.pool(size: 2))
            let devices = DeviceRepository(database: database)
            let logs = PoopLogRepository(database: database)
            let (a, b, erasing) = (try DeviceID(UUID()), try DeviceID(UUID()), try DeviceID(UUID()))
            // Registered as the service did before sql/0027 (the repository now calls a function of 0027).
            for device in [a, b, erasing] {
                try await database.asDevice(device) { tx in try tx.finalQuery("INSERT INTO devices (key, model) VALUES (\(device.key), 'phone')") }
            }
            // Logs as the service wrote them then (the repository now names the device's id, checked by a function of 0030).
            for _ in 0..<3 {
                try await database.asDevice(erasing) { tx in
                    try tx.finalQuery("INSERT INTO poop_logs (device_id, occurred_at, bristol_type) VALUES (get_current_device_id(), now(), 3)")
                }
            }
            _ = try await devices.erase(as: erasing, batch: 1)
            await database.pool.close()

            try await db.withConnection { _ = try Migrator(files: files).migrate(on: $0) }
            let map = try await Self.map(db)
            #expect(map.count == 2)
            #expect(map == (try await Self.liveDevices(db)))
            #expect(map.contains { $0.hasPrefix(erasing.key.uuidString.lowercased()) } == false)
            // And the device of the transaction is found through it.
            let check = Database(pool: db.pool(size: 1))
            let found = try await check.asDevice(a) { tx in
                try tx.finalQuery("SELECT get_current_device_id() IS NOT NULL")[0].decode(0, as: Bool.self)
            }
            #expect(found)
            await check.pool.close()
        }
    }
}
