import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// How the tests reach the server: directly, or through PgBouncer in transaction-pooling mode.
enum Route: String, CaseIterable, Sendable {
    case direct, pgbouncer

    /// Direct always; through PgBouncer when `PGBOUNCER_URL` is set (`scripts/test.sh` reports it as not run
    /// otherwise).
    static var available: [Route] { TestEnvironment.hasPgBouncer ? allCases : [.direct] }

    func database(_ db: TestDatabase, poolSize: Int = 4, deviceSlots: DeviceSlots = DeviceSlots(),
                  acquireTimeout: Duration = .seconds(10)) throws -> Database {
        let target = self == .direct ? db : try db.throughPgBouncer
        return Database(pool: target.pool(size: poolSize, acquireTimeout: acquireTimeout), deviceSlots: deviceSlots)
    }
}

/// Device-scoped statements the tests use; every value is bound.
enum Seed {
    static func device(_ database: Database, _ id: UUID) async throws {
        _ = try await DeviceRepository(database: database).register(DeviceInfo(model: "test phone"), as: DeviceID(id))
    }

    static func log(_ database: Database, _ device: UUID, bristol: Int = 4) async throws -> UUID {
        try await database.asDevice(DeviceID(device)) { tx in
            try tx.finalQuery("""
                INSERT INTO poop_logs (device_id, occurred_at, bristol_type) VALUES (get_current_device_id(), now(), \(bristol))
                RETURNING id
                """)[0].decode("id", as: UUID.self)
        }
    }

    static func ids(_ database: Database, as device: UUID, _ sql: PostgresQuery) async throws -> [UUID] {
        try await database.asDevice(DeviceID(device)) { tx in try tx.finalQuery(sql).map { try $0.decode(0, as: UUID.self) } }
    }
}

@Suite("Device isolation by row-level security")
struct DeviceIsolationTests {
    @Test func emptySettingTrapIsReproducedAndTheFunctionReturnsNull() async throws {
        try await TestDatabase.withMigrated { db in
            try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('app.device_id', \(UUID().uuidString), true)")
                }
                // The trap: after the transaction the setting reads '' on this connection, not NULL …
                #expect(try conn.query("SELECT current_setting('app.device_id', true)")[0].decode(0, as: String?.self) == "")
                let cast = #expect(throws: PostgresError.self) {
                    try conn.query("SELECT current_setting('app.device_id', true)::uuid")
                }
                #expect(cast?.sqlState == .invalidTextRepresentation)
                // … and the function turns both unset and '' into NULL.
                #expect(try conn.query("SELECT get_current_device_id() IS NULL")[0].decode(0, as: Bool.self))
            }
        }
    }

    @Test(arguments: Route.available)
    func aConnectionThatServedADeviceThenServesNoDeviceSeesNothingAndFailsNothing(_ route: Route) async throws {
        try await TestDatabase.withMigrated { db in
            let database = try route.database(db, poolSize: 1)
            let device = UUID()
            try await Seed.device(database, device)
            _ = try await Seed.log(database, device)
            // Same pooled connection, now as the service role with no device at all.
            let counts = try await database.pool.withConnection { conn in
                try conn.pipeline([
                    "BEGIN",
                    "SELECT set_config('role', poopypals_service_role(), true)",
                    "SELECT (SELECT count(*) FROM poop_logs)::int, (SELECT count(*) FROM devices)::int, get_current_device_id() IS NULL",
                    "COMMIT",
                ])[2][0]
            }
            #expect(try counts.decode(0, as: Int.self) == 0)
            #expect(try counts.decode(1, as: Int.self) == 0)
            #expect(try counts.decode(2, as: Bool.self))
            // The explicit system path (the owner, no device) sees nothing on forced tables either.
            let system = try await database.asSystem { try $0.query("SELECT count(*)::int FROM poop_logs")[0].decode(0, as: Int.self) }
            #expect(system == 0)
            await database.pool.close()
        }
    }

    @Test(arguments: Route.available)
    func pooLogsCommandsAreLimitedToTheOwningDevice(_ route: Route) async throws {
        try await TestDatabase.withMigrated { db in
            let database = try route.database(db)
            let (a, b) = (UUID(), UUID())
            try await Seed.device(database, a)
            try await Seed.device(database, b)
            let logA = try await Seed.log(database, a)
            let logB = try await Seed.log(database, b, bristol: 6)

            // SELECT: own rows only; another device's id is simply not there.
            #expect(try await Seed.ids(database, as: a, "SELECT id FROM poop_logs") == [logA])
            #expect(try await Seed.ids(database, as: a, "SELECT id FROM poop_logs WHERE id = \(logB)") == [])

            // INSERT for another device: WITH CHECK refuses it with 42501.
            let insert = await #expect(throws: PostgresError.self) {
                try await database.asDevice(DeviceID(a)) { tx in
                    try tx.finalQuery("INSERT INTO poop_logs (device_id, occurred_at, bristol_type) VALUES (\(b.deviceKey), now(), 3)")
                }
            }
            #expect(insert?.sqlState == .insufficientPrivilege)

            // UPDATE: another device's row is invisible (0 rows, USING); moving an own row away is 42501 (WITH CHECK).
            let foreignUpdate = try await database.asDevice(DeviceID(a)) { tx in
                try tx.finalQuery("UPDATE poop_logs SET bristol_type = 1 WHERE id = \(logB)").rowsAffected
            }
            #expect(foreignUpdate == 0)
            let move = await #expect(throws: PostgresError.self) {
                try await database.asDevice(DeviceID(a)) { tx in
                    try tx.finalQuery("UPDATE poop_logs SET device_id = \(b.deviceKey) WHERE id = \(logA)")
                }
            }
            // On the distributed schema device_id is the distribution column, which Citus lets no update change (0A000,
            // before any policy is asked).
            #expect(move?.sqlState == (TestEnvironment.distributesEveryDatabase ? .featureNotSupported : .insufficientPrivilege), "\(String(describing: move))")
            let ownUpdate = try await database.asDevice(DeviceID(a)) { tx in
                try tx.finalQuery("UPDATE poop_logs SET bristol_type = 2 WHERE id = \(logA)").rowsAffected
            }
            #expect(ownUpdate == 1)

            // DELETE: another device's row is untouched (0 rows); own row goes.
            let foreignDelete = try await database.asDevice(DeviceID(a)) { tx in
                try tx.finalQuery("DELETE FROM poop_logs WHERE id = \(logB)").rowsAffected
            }
            #expect(foreignDelete == 0)
            let bristolB = try await database.asDevice(DeviceID(b)) { tx in
                try tx.finalQuery("SELECT bristol_type FROM poop_logs WHERE id = \(logB)")[0].decode(0, as: Int.self)
            }
            #expect(bristolB == 6)
            let ownDelete = try await database.asDevice(DeviceID(a)) { tx in
                try tx.finalQuery("DELETE FROM poop_logs WHERE id = \(logA)").rowsAffected
            }
            #expect(ownDelete == 1)
            await database.pool.close()
        }
    }

    @Test(arguments: Route.available)
    func devicesCommandsAreLimitedToTheDeviceItself(_ route: Route) async throws {
        try await TestDatabase.withMigrated { db in
            let database = try route.database(db)
            let (a, b) = (UUID(), UUID())
            try await Seed.device(database, a)
            try await Seed.device(database, b)

            #expect(try await Seed.ids(database, as: a, "SELECT key FROM devices") == [a.deviceKey])
            #expect(try await Seed.ids(database, as: a, "SELECT key FROM devices WHERE key = \(b.deviceKey)") == [])

            let insertOther = await #expect(throws: PostgresError.self) {
                try await database.asDevice(DeviceID(a)) { tx in try tx.finalQuery("INSERT INTO devices (key) VALUES (\(UUID()))") }
            }
            #expect(insertOther?.sqlState == .insufficientPrivilege)

            let foreignUpdate = try await database.asDevice(DeviceID(a)) { tx in
                try tx.finalQuery("UPDATE devices SET last_seen_at = now() + interval '1 day' WHERE key = \(b.deviceKey)").rowsAffected
            }
            #expect(foreignUpdate == 0)
            // Neither the internal id nor the key is the device's to change (rotation is the profile role's function's).
            for column in ["id", "key"] {
                let renumber = await #expect(throws: PostgresError.self) {
                    try await database.asDevice(DeviceID(a)) { tx in
                        try tx.finalQuery("UPDATE devices SET \(unescaped: column) = \(UUID()) WHERE key = \(a.deviceKey)")
                    }
                }
                // devices.id is the distribution column of the distributed schema: Citus refuses its update first (0A000).
                let distributionColumn = TestEnvironment.distributesEveryDatabase && column == "id"
                #expect(renumber?.sqlState == (distributionColumn ? .featureNotSupported : .insufficientPrivilege), "\(column): \(String(describing: renumber))")
            }
            let ownUpdate = try await database.asDevice(DeviceID(a)) { tx in
                try tx.finalQuery("UPDATE devices SET last_seen_at = now() WHERE key = \(a.deviceKey)").rowsAffected
            }
            #expect(ownUpdate == 1)

            let modelB = try await database.asDevice(DeviceID(b)) { tx in
                try tx.finalQuery("SELECT model, last_seen_at < now() + interval '12 hours' AS untouched FROM devices")[0]
            }
            #expect(try modelB.decode("model", as: String.self) == "test phone" && modelB.decode("untouched", as: Bool.self))
            // No device deletes a device row, its own included: erasure is the profile role's function's (sql/0027).
            let delete = await #expect(throws: PostgresError.self) {
                try await database.asDevice(DeviceID(a)) { tx in try tx.finalQuery("DELETE FROM devices WHERE key = \(a.deviceKey)") }
            }
            #expect(delete?.sqlState == .insufficientPrivilege)
            await database.pool.close()
        }
    }

    @Test(arguments: Route.available)
    func fiftyDevicesInterleavedOnASmallPoolNeverSeeEachOther(_ route: Route) async throws {
        try await TestDatabase.withMigrated { db in
            // Four slots a device (its four reads below at once), and a minute's wait for a connection: what is tested is
            // isolation, not how long a request waits while 200 reads share four connections. On the distributed schema
            // each of these reads, naming no device, runs on every shard: the 3 s slot and 10 s pool waits ran out.
            let database = try route.database(db, poolSize: 4, deviceSlots: DeviceSlots(perDevice: 4), acquireTimeout: .seconds(60))
            let devices = (0..<50).map { _ in UUID() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, device) in devices.enumerated() {
                    group.addTask {
                        try await Seed.device(database, device)
                        for _ in 0..<(1 + index % 4) { _ = try await Seed.log(database, device) }
                    }
                }
                try await group.waitForAll()
            }
            // 50 devices × 4 rounds of reads, interleaved on 4 connections.
            let violations = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 {
                    for (index, device) in devices.enumerated() {
                        group.addTask {
                            let rows = try await database.asDevice(DeviceID(device)) { tx in
                                // Each log's device, by the key it is found with (the device's id is internal: sql/0021).
                                try tx.finalQuery("""
                                    SELECT (SELECT d.key FROM devices d WHERE d.id = l.device_id) FROM poop_logs l ORDER BY occurred_at
                                    """).map { try $0.decode(0, as: UUID?.self) }
                            }
                            let foreign = rows.filter { $0 != device.deviceKey }.count
                            return foreign + (rows.count == 1 + index % 4 ? 0 : 1)
                        }
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(violations == 0)
            await database.pool.close()
        }
    }

    @Test(arguments: [
        nil, "", "not-a-uuid", String(repeating: "a", count: 10_240),
        "'; DROP TABLE poop_logs; --", "00000000-0000-0000-0000-000000000000",
        "6f1c0a4e-0000-4000-8000-00000000000", "6f1c0a4e-0000-4000-8000-0000000000011",
        "6f1c0a4e-0000-4000-8000-000000000001' OR '1'='1",
    ])
    func invalidDeviceIDsAreRejectedBeforeAnyQuery(_ raw: String?) async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let error = await #expect(throws: AuthenticationError.self) {
                try await database.asDevice(raw) { tx in try tx.finalQuery("SELECT 1") }
            }
            #expect(error.map { "\($0)" }?.hasPrefix("not authenticated") == true)
            if let raw, !raw.isEmpty { #expect(error.map { "\($0)" }?.contains(raw) == false) }
            // No connection was even opened.
            #expect(database.pool.statistics.open == 0)
            await database.pool.close()
        }
    }

    @Test func theServiceRoleIsNotOwnerSuperuserOrBypassRLS() async throws {
        try await TestDatabase.withMigrated { db in
            let facts = try await db.withConnection { conn in
                try conn.query("""
                    SELECT r.rolsuper, r.rolbypassrls, r.rolcanlogin,
                           (SELECT count(*) FROM pg_class c WHERE c.relowner = r.oid)::int AS owned,
                           (SELECT bool_and(relrowsecurity AND relforcerowsecurity) FROM pg_class
                             WHERE relname IN ('devices', 'poop_logs') AND relkind = 'r') AS forced,
                           has_table_privilege(r.oid, 'schema_migrations', 'SELECT') AS sees_history,
                           pg_has_role(current_user, r.oid, 'MEMBER') AS can_switch, r.rolname::text AS name
                    FROM pg_roles r WHERE r.rolname = poopypals_service_role()
                    """)[0]
            }
            #expect(try facts.decode("rolsuper", as: Bool.self) == false)
            #expect(try facts.decode("rolbypassrls", as: Bool.self) == false)
            // On the distributed schema the role logs in (sql/0031): Citus reaches the workers as the role a transaction
            // switched to. Only through the nodes' private socket folder, without a password (scripts/citus.sh).
            #expect(try facts.decode("rolcanlogin", as: Bool.self) == TestEnvironment.distributesEveryDatabase)
            #expect(try facts.decode("owned", as: Int.self) == 0)
            #expect(try facts.decode("forced", as: Bool.self))
            #expect(try facts.decode("sees_history", as: Bool.self) == false)
            #expect(try facts.decode("can_switch", as: Bool.self))

            let database = Database(pool: db.pool(size: 1))
            let users = try await database.asDevice(DeviceID(UUID())) { tx in
                try tx.finalQuery("SELECT current_user::text, session_user::text")[0]
            }
            // This database's own service role (sql/0022), not the server's shared one.
            #expect(try users.decode(0, as: String.self) == (try facts.decode("name", as: String.self)))
            #expect(try facts.decode("name", as: String.self).hasPrefix("poopypals_app_"))
            // The session is still the login (whatever the deployment calls it): only the transaction switched.
            #expect(try users.decode(1, as: String.self) == (try await db.withConnection { try $0.query("SELECT current_user::text")[0].decode(0, as: String.self) }))
            await database.pool.close()
        }
    }

    @Test func forcedRLSHoldsForTheTableOwnerToo() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let (a, b) = (UUID(), UUID())
            for device in [a, b] {
                try await Seed.device(database, device)
                _ = try await Seed.log(database, device)
            }
            // The owner's own connection, device context set but no switch to the service role.
            let counts = try await db.rolledBack { conn in
                try conn.transaction { conn in
                    try TestDatabase.setDevice(a.deviceKey, on: conn)
                    if TestEnvironment.distributesEveryDatabase {
                        // One connection per node, so that the ALTER below may follow the reads in this transaction.
                        try conn.executeScript("SET LOCAL citus.multi_shard_modify_mode = 'sequential'")
                    }
                    let forced = try conn.query("SELECT count(*)::int FROM poop_logs")[0].decode(0, as: Int.self)
                    try conn.executeScript("ALTER TABLE poop_logs NO FORCE ROW LEVEL SECURITY")
                    let unforced = try conn.query("SELECT count(*)::int FROM poop_logs")[0].decode(0, as: Int.self)
                    throw Rollback(values: [forced, unforced])
                }
            }
            #expect(counts == [1, 2])
            await database.pool.close()
        }
    }
}

/// Thrown to roll a test transaction back while carrying what it saw.
struct Rollback: Error {
    let values: [Int]
}

extension TestDatabase {
    /// Runs `body`, expecting it to throw `Rollback`, and returns the values it carried.
    func rolledBack(_ body: @escaping @Sendable (Connection) throws -> Void) async throws -> [Int] {
        do {
            try await withConnection(body)
        } catch let rollback as Rollback {
            return rollback.values
        }
        throw SetupError("the body was expected to roll back")
    }
}
