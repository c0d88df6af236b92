import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// sql/0028, 0029: every policy and function in a form a Citus shard can run (issue 45). No policy has a sub-select (Citus refuses one
/// when it propagates a policy to the shards); a device's user comes from the key map, which the profile function
/// writes; the profile role's erasure batch checks the erasure itself, since its policies no longer look it up.
@Suite("Policies a shard can run")
struct ShardablePolicyTests {
    /// Failed before sql/0028: sixteen policies had a sub-select.
    @Test func noPolicyHasASubSelect() async throws {
        try await TestDatabase.withMigrated { db in
            let withSubSelect = try await db.withConnection { conn in
                try conn.query("""
                    SELECT polrelid::regclass::text || ': ' || polname FROM pg_policy
                    WHERE coalesce(pg_get_expr(polqual, polrelid), '') || coalesce(pg_get_expr(polwithcheck, polrelid), '') ~* '\\mselect\\M'
                    ORDER BY 1
                    """).map { try $0.decode(0, as: String.self) }
            }
            #expect(withSubSelect == [])
        }
    }

    /// sql/0029: no function has a sub-select without a column (`EXISTS (SELECT FROM …)`), which Citus fails to run
    /// on a distributed table it plans in two steps ("a column definition list is required"). Failed before it: the
    /// registration, rotation, erasure, profile and trigger functions had such sub-selects.
    @Test func noFunctionHasASubSelectWithoutAColumn() async throws {
        try await TestDatabase.withMigrated { db in
            let columnless = try await db.withConnection { conn in
                try conn.query("""
                    SELECT p.oid::regprocedure::text FROM pg_proc p
                    WHERE p.pronamespace = 'public'::regnamespace AND p.prosrc ~* '\\(\\s*select\\s+from\\M'
                    ORDER BY 1
                    """).map { try $0.decode(0, as: String.self) }
            }
            #expect(columnless == [])
        }
    }

    /// Every disagreement between the map and the devices not being erased: a row of either without the other, or
    /// another key or user (none when the map keeps up).
    static func disagreeing(_ db: TestDatabase) async throws -> [String] {
        try await Superuser.column("""
            SELECT coalesce(m.id, d.id)::text FROM device_key_map m
            FULL JOIN (SELECT * FROM devices WHERE erasing_since IS NULL) d ON d.id = m.id
            WHERE m.id IS NULL OR d.id IS NULL OR m.key IS DISTINCT FROM d.key OR m.user_id IS DISTINCT FROM d.user_id
            """, in: db.name)
    }

    @Test func theMapKeepsEachDevicesUserThroughLinkRotationAndErasure() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let devices = DeviceRepository(database: database)
            let users = UserRepository(database: database)
            let (a, b) = (try DeviceID(UUID()), try DeviceID(UUID()))
            for device in [a, b] { _ = try await devices.register(DeviceInfo(model: "phone"), as: device) }
            let subject = UUID()
            _ = try await users.ensureProfile(as: a, id: subject, email: "map-user@example.com")
            #expect(try await Superuser.column("SELECT count(*)::text FROM device_key_map WHERE user_id IS NOT NULL", in: db.name) == ["1"])
            #expect(try await Self.disagreeing(db) == [])
            // The users' policies read it: the linked device finds its user, the other one does not.
            #expect(try await users.find(id: subject, as: a)?.id == subject)
            #expect(try await users.find(id: subject, as: b) == nil)

            let rotated = try DeviceID(UUID())
            _ = try await devices.rotate(as: a, to: rotated)
            #expect(try await users.find(id: subject, as: rotated)?.id == subject)
            #expect(try await users.find(id: subject, as: a) == nil)
            #expect(try await Self.disagreeing(db) == [])

            // b links to the same profile; erasing the rotated device leaves b's link alone.
            _ = try await users.ensureProfile(as: b, id: subject, email: "map-user@example.com")
            _ = try await devices.erase(as: rotated, subject: subject)
            #expect(try await users.find(id: subject, as: b)?.id == subject)
            #expect(try await Superuser.column("SELECT count(*)::text FROM device_key_map", in: db.name) == ["1"])
            #expect(try await Self.disagreeing(db) == [])
            await database.pool.close()
        }
    }

    /// The migration copies each device's user into the map.
    @Test func theMigrationFillsEachDevicesUser() async throws {
        try await TestDatabase.with { db in
            let files = try MigrationFile.load(directory: TestProject.migrationsDirectory)
            let options = { var options = Migrator.Options(); options.target = 27; return options }()
            try await db.withConnection { _ = try Migrator(files: files, options: options).migrate(on: $0) }
            let database = Database(pool: db.pool(size: 2))
            let (a, b) = (try DeviceID(UUID()), try DeviceID(UUID()))
            for device in [a, b] { _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: device) }
            let subject = UUID()
            _ = try await UserRepository(database: database).ensureProfile(as: a, id: subject, email: "filled@example.com")
            try await db.withConnection { _ = try Migrator(files: files).migrate(on: $0) }
            #expect(try await Superuser.column("SELECT user_id::text FROM device_key_map WHERE user_id IS NOT NULL", in: db.name)
                    == [subject.uuidString.lowercased()])
            #expect(try await Self.disagreeing(db) == [])
            #expect(try await UserRepository(database: database).find(id: subject, as: a)?.id == subject)
            await database.pool.close()
        }
    }

    /// The profile role's erasure batch deletes nothing of a device whose erasure has not started, even run by hand
    /// as that role (its policies on poop_logs now admit any log: a shard cannot look the erasure up).
    @Test func theErasureBatchRefusesADeviceNotBeingErased() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let device = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: device)
            for _ in 0..<3 { _ = try await PoopLogRepository(database: database).create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: device) }
            await database.pool.close()
            let profiles = try #require(try await Superuser.column("SELECT poopypals_profiles_role()", in: db.name).first)
            let id = try #require(try await Superuser.column("SELECT id::text FROM devices", in: db.name).first)
            let refused = await #expect(throws: PostgresError.self) {
                try await Superuser.execute("SET ROLE \"\(profiles)\"; SELECT * FROM poopypals_erase_batch('\(id)', 10)", in: db.name)
            }
            #expect(refused?.sqlState == "55000")
            #expect(try await Superuser.column("SELECT count(*)::text FROM poop_logs", in: db.name) == ["3"])
        }
    }
}
