import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

extension CitusTests {
    /// Our schema distributed on the cluster by `poopypals migrate` (sql/0031, docs/scaling.md, "Sharding by device"):
    /// a device's whole life through the functions the coordinator runs and statements that name the device's id.
    @Suite("The schema distributed by device")
    struct Distributed {
        /// Registration, logs with their change numbers and tombstones, isolation on the shards, a profile, the start
        /// of an erasure, a registration and a rotation of the device being erased, the background erasure, the
        /// same key registering again, a live device's rotation, and an erasure by email. Failed before sql/0029 at the first registration ("a column definition list is
        /// required for functions returning record"); by hand, each of 0029's mends was the next failure: the log
        /// trigger's update ("non-IMMUTABLE functions are not allowed in CASE or COALESCE statements"), the profile's
        /// insert, the erasure's locks and update, the registration token's upsert, the background erasure's key
        /// cast, and the registration of a device being erased, which crashed the coordinator (signal 11).
        @Test func aDevicesWholeLifeRunsOnTheDistributedSchema() async throws {
            try await CitusCluster.withMigratedDatabase("citus_l_") { _, _, pool in
                let kinds = try await pool.withConnection { conn in
                    try conn.query("SELECT logicalrelid::text || ' ' || partmethod::text FROM pg_dist_partition ORDER BY 1").map { try $0.decode(0, as: String.self) }
                }
                #expect(kinds == ["device_key_map n", "devices h", "erasing_device_keys n", "poop_log_tombstones h", "poop_logs h", "registration_buckets n", "users n"])
                try await Self.live(Database(pool: pool))
            }
        }

        /// sql/0033 on a database distributed before it, with an erasure under way: the migration fills the erasing
        /// keys from the devices being erased, and the erasure goes on (registration "being erased", continued by its
        /// key, finished in the background, the key free again). sql/0034 makes the list and the map's links whole
        /// after what calls under way during 0033 could leave; sql/0035 builds its index on the reference table.
        @Test func theErasingKeysMigrationKeepsAnErasureUnderWay() async throws {
            try await CitusCluster.withMigratedDatabase("citus_e_", upTo: 32) { name, url, pool in
                let database = Database(pool: pool)
                let devices = DeviceRepository(database: database)
                let (erasing, live) = (try DeviceID(UUID()), try DeviceID(UUID()))
                for device in [erasing, live] { _ = try await devices.register(DeviceInfo(model: "phone"), as: device) }
                for _ in 0..<3 { _ = try await PoopLogRepository(database: database).create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: erasing) }
                #expect(try await devices.erase(as: erasing, batch: 1)?.logsRemaining == 2)
                let subject = UUID()
                _ = try await UserRepository(database: database).ensureProfileAndLink(as: live, id: subject, email: "upgrade@example.com")
                await database.pool.close()

                let filled = try await TestProject.run(["migrate", "up", "--target", "33", "--database-url", url], timeout: .seconds(120))
                try #require(filled.status == 0, "\(filled.stdout)\n\(filled.stderr)")
                // What calls under way during 0033 could leave (sql/0034 makes it whole): the erasure without its row, a
                // row of no device, the map's user_id missing a link.
                let superuser = try CitusCluster.superuser(name, url: url)
                let listed = { @Sendable () async throws -> [String] in
                    try await superuser.withConnection { conn in
                        try conn.query("SELECT e.id::text FROM erasing_device_keys e ORDER BY 1").map { try $0.decode(0, as: String.self) }
                    }
                }
                let erasingIDs = try await superuser.withConnection { conn in
                    try conn.query("SELECT d.id::text FROM devices d WHERE d.erasing_since IS NOT NULL").map { try $0.decode(0, as: String.self) }
                }
                #expect(try await listed() == erasingIDs && erasingIDs.count == 1)
                try await superuser.withConnection { conn in
                    try CitusCluster.run(conn, "DELETE FROM erasing_device_keys")
                    try CitusCluster.run(conn, "INSERT INTO erasing_device_keys (id, key, since) VALUES (gen_random_uuid(), gen_random_uuid(), now())")
                    try CitusCluster.run(conn, "UPDATE device_key_map SET user_id = NULL")
                }
                let migrated = try await TestProject.run(["migrate", "up", "--database-url", url], timeout: .seconds(120))
                try #require(migrated.status == 0, "\(migrated.stdout)\n\(migrated.stderr)")
                #expect(try await listed() == erasingIDs)
                let linked = try await superuser.withConnection { conn in
                    try conn.query("SELECT m.user_id::text FROM device_key_map m").map { try $0.decode(0, as: String.self) }
                }
                #expect(linked == [subject.uuidString.lowercased()])
                await superuser.close()
                let after = Database(pool: ConnectionPool(configuration: .init(connection: ConnectionConfiguration(connectionString: url, applicationName: "poopypals-tests"),
                                                                              maxConnections: 2)))
                let again = DeviceRepository(database: after)
                await #expect(throws: RepositoryError.deviceBeingErased) { _ = try await again.register(DeviceInfo(model: "again"), as: erasing) }
                #expect(try await again.erase(as: erasing, batch: 1)?.logsRemaining == 1)
                _ = try await PendingErasures(database: after).run(maxBatches: 10, until: .now + .seconds(30))
                #expect(try await again.erase(as: erasing) == nil)
                #expect(try await again.register(DeviceInfo(model: "new"), as: erasing).created)
                #expect(try await again.register(DeviceInfo(model: "phone 2"), as: live).created == false)
                await after.pool.close()
            }
        }

        /// The repositories' device operations, as the service runs them (each statement naming the device's stored id,
        /// sql/0030), on a distributed copy, each on one shard: with `citus.multi_task_query_log_level = error` for the
        /// database, any statement that would run on more than one shard (a task per shard) fails, and so the test; with
        /// `citus.max_intermediate_result_size = 0`, so does any statement Citus runs in steps through the coordinator.
        /// Registration of a known key, the device's row, create and its replay, list and its next page, get, update,
        /// delete, a sync push of each kind and the pull, an export, the profile and its link, the profile lookup; a
        /// new key's registration, rotation and erasure (`keys`).
        @Test func eachDeviceOperationRunsOnOneShardOfTheDistributedSchema() async throws {
            try await CitusCluster.withMigratedDatabase("citus_r_") { name, url, pool in
                // Registered before the limits below are set; a new key's registration is on one shard too (since
                // sql/0033, the erasing keys a reference table: `keys` registers one under them, and it failed before).
                let (a, b) = (try DeviceID(UUID()), try DeviceID(UUID()))
                let setUp = DeviceRepository(database: Database(pool: pool))
                #expect(try await setUp.register(DeviceInfo(model: "phone"), as: a).created)
                #expect(try await setUp.register(DeviceInfo(model: "tablet"), as: b).created)
                // And no statement planned in steps (a CTE or sub-query whose result Citus gathers on the coordinator and
                // sends back to the worker: a router statement no more): no intermediate result may hold a byte.
                try await pool.withConnection {
                    try CitusCluster.run($0, "ALTER DATABASE \(name) SET citus.multi_task_query_log_level = 'error'")
                    try CitusCluster.run($0, "ALTER DATABASE \(name) SET citus.max_intermediate_result_size = 0")
                }
                let routed = ConnectionPool(configuration: .init(connection: ConnectionConfiguration(connectionString: url, applicationName: "poopypals-tests"),
                                                                 maxConnections: 2))
                // The setting holds for the service's sessions: a read over every shard is refused.
                let fanned = await #expect(throws: PostgresError.self) {
                    try await routed.withConnection { try $0.query("SELECT count(*) FROM poop_logs") }
                }
                #expect(fanned?.message.contains("multi-task query") == true)
                // And one planned in steps: create's statement until this test found it so (an insert in a CTE, read by
                // the outer statement: the insert ran on the worker, its row came back to the coordinator and went to the
                // worker again for the rest, three round trips to the worker; 10 times plain PostgreSQL's time in make bench).
                let routedDatabase = Database(pool: routed)
                let stepped = await #expect(throws: PostgresError.self) {
                    try await routedDatabase.asDevice(a) { tx in
                        let stored = try tx.storedID()
                        return try tx.finalQuery("""
                            WITH inserted AS (INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type) VALUES (\(UUID()), \(stored), now(), 4)
                                              ON CONFLICT (device_id, id) DO NOTHING RETURNING id)
                            SELECT id FROM inserted UNION ALL SELECT id FROM poop_logs WHERE device_id = \(stored) AND NOT EXISTS (SELECT FROM inserted)
                            """).count
                    }
                }
                #expect(stepped?.message.contains("max_intermediate_result_size") == true, "\(String(describing: stepped))")
                try await Self.logs(routedDatabase, a, b)
                try await Self.keys(routedDatabase, linked: a)
                await routed.close()
            }
        }

        static func logs(_ database: Database, _ a: DeviceID, _ b: DeviceID) async throws {
            let devices = DeviceRepository(database: database)
            #expect(try await devices.register(DeviceInfo(model: "phone 2"), as: a).created == false)
            #expect(try await devices.current(as: a)?.info.model == "phone 2")
            let logs = PoopLogRepository(database: database)
            let id = UUID()
            let new = NewPoopLog(id: id, occurredAt: Date(timeIntervalSince1970: 1_700_000_000), bristolType: 3, notes: "n")
            #expect(try await logs.create(new, as: a).created)
            #expect(try await logs.create(new, as: a).created == false)
            for n in 0..<3 {
                _ = try await logs.create(NewPoopLog(occurredAt: Date(timeIntervalSince1970: Double(1_700_000_100 + n)), bristolType: 4), as: a)
            }
            let first = try await logs.list(limit: 2, as: a)
            let second = try await logs.list(before: first.nextCursor, limit: 2, as: a)
            #expect(first.items.count == 2 && second.items.count == 2)
            #expect(try await logs.get(id, as: a)?.notes == "n")
            #expect(try await logs.get(id, as: b) == nil)
            #expect(try await logs.update(id, PoopLogPatch(bristolType: 5), as: a)?.bristolType == 5)
            #expect(try await logs.list(as: b).items.isEmpty)
            let sync = SyncRepository(database: database)
            let other = UUID()
            let pushed = try await sync.push([
                .upsert(id: other, occurredAt: Date(timeIntervalSince1970: 1_700_000_200), bristolType: 2, notes: nil, baseVersion: nil),
                .upsert(id: id, occurredAt: new.occurredAt, bristolType: 6, notes: "changed", baseVersion: nil),
                .delete(id: other),
            ], as: a)
            #expect(pushed.results.map(\.1) == [.created, .updated, .deleted])
            var pulled: [SyncChange] = []
            var cursor: String?
            for _ in 0..<10 {
                let page = try await sync.pull(cursor: cursor, limit: 2, as: a)
                pulled += page.changes
                cursor = page.cursor
                if !page.hasMore { break }
            }
            #expect(pulled.count == 5)  // four live logs and the delete
            let exported = Locked(0)
            #expect(try await DeviceExport(database: database, batchSize: 2).run(as: a) { part in
                if case .logs(let batch) = part { exported.withLock { $0 += batch.count } }
            })
            #expect(exported.value == 4)
            let subject = UUID()
            _ = try await UserRepository(database: database).ensureProfileAndLink(as: a, id: subject, email: "logs@example.com")
            #expect(try await UserRepository(database: database).find(id: subject, as: a)?.email == "logs@example.com")
            #expect(try await logs.delete(id, as: a))
            #expect(try await logs.delete(id, as: a) == false)
        }

        /// A key's life on one shard (sql/0033: the devices being erased are a reference table): a new key's
        /// registration, its rotation, its erasure begun, a registration of the erased key ("being erased") and a
        /// rotation to it ("in use"), the erasure continued by the key and finished in the background, the key
        /// registered again, and the erasure of `linked`, a device linked to its profile (the profile goes with its
        /// last device).
        static func keys(_ database: Database, linked: DeviceID) async throws {
            let devices = DeviceRepository(database: database)
            let (new, rotated) = (try DeviceID(UUID()), try DeviceID(UUID()))
            #expect(try await devices.register(DeviceInfo(model: "new"), as: new).created)
            _ = try await database.asDevice(new) { tx in
                let stored = try tx.storedID()
                return try tx.finalQuery("""
                    INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type)
                    VALUES (\(UUID()), \(stored), date_trunc('second', now()), 4), (\(UUID()), \(stored), date_trunc('second', now()), 5),
                           (\(UUID()), \(stored), date_trunc('second', now()), 6)
                    """).rowsAffected
            }
            #expect(try await devices.rotate(as: new, to: rotated).info.model == "new")
            #expect(try await devices.erase(as: rotated, batch: 1) == DeviceRepository.Erasure(logs: 1, profileErased: false, logsRemaining: 2))
            await #expect(throws: RepositoryError.deviceBeingErased) {
                _ = try await devices.register(DeviceInfo(model: "again"), as: rotated)
            }
            await #expect(throws: RepositoryError.deviceIDInUse) {
                _ = try await devices.rotate(as: linked, to: rotated)
            }
            #expect(try await devices.erase(as: rotated, batch: 1) == DeviceRepository.Erasure(logs: 1, profileErased: false, logsRemaining: 1))
            // The background erasure finishes it: its choice of device, the batch and the count of what is left.
            let background = try await PendingErasures(database: database, batch: 10).run(maxBatches: 5, until: .now + .seconds(30))
            #expect(background.logsErased == 1 && background.devicesErasing == 0, "\(background)")
            #expect(try await devices.erase(as: rotated, batch: 10) == nil)
            #expect(try await devices.register(DeviceInfo(model: "after"), as: rotated).created)
            let subject = try #require(try await devices.current(as: linked)?.userID)
            #expect(try await devices.erase(as: linked, subject: subject, batch: 100)?.profileErased == true)
        }

        static func live(_ database: Database) async throws {
            let devices = DeviceRepository(database: database)
            let (a, b) = (try DeviceID(UUID()), try DeviceID(UUID()))
            let network = NetworkKeys(tokenSecret: "tests").key("v4:192.0.2.9")
            #expect(try await devices.register(DeviceInfo(model: "phone"), as: a, network: network).created)
            #expect(try await devices.register(DeviceInfo(model: "tablet"), as: b, network: network).created)
            #expect(try await devices.register(DeviceInfo(model: "phone 2"), as: a, network: network).created == false)
            let id = { @Sendable (device: DeviceID) in
                try await database.asDevice(device, readOnly: true) { tx in try tx.finalQuery("SELECT get_current_device_id()")[0].decode(0, as: UUID.self) }
            }
            let aID = try await id(a)

            // Logs named by the device's id (one shard), numbered by the trigger on the shard; a delete leaves a tombstone.
            var seqs: [Int64] = []
            for n in 0..<3 {
                seqs.append(try await database.asDevice(a) { tx in
                    try tx.finalQuery("""
                        INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type) VALUES (\(UUID()), \(aID), date_trunc('second', now()) - \(n) * interval '1 s', 4)
                        RETURNING change_seq
                        """)[0].decode(0, as: Int64.self)
                })
            }
            #expect(seqs == [1, 2, 3])
            let deleted = try await database.asDevice(a) { tx in
                try tx.finalQuery("DELETE FROM poop_logs WHERE device_id = \(aID) AND change_seq = 3").rowsAffected
            }
            #expect(deleted == 1)
            let counts = try await database.asDevice(a, readOnly: true) { tx in
                let row = try tx.finalQuery("""
                    SELECT d.change_seq, d.log_count, d.tombstone_count, (SELECT count(*) FROM poop_log_tombstones t WHERE t.device_id = \(aID)) AS tombstones
                    FROM devices d WHERE d.id = \(aID)
                    """)[0]
                return try [row.decode(0, as: Int64.self), row.decode(1, as: Int64.self), row.decode(2, as: Int64.self), row.decode(3, as: Int64.self)]
            }
            #expect(counts == [4, 2, 1, 1])

            // Another device, on the shards: sees none of them, changes none, and cannot write one under a's id.
            let seenByB = try await database.asDevice(b, readOnly: true) { tx in
                try tx.finalQuery("SELECT count(*) FROM poop_logs WHERE device_id = \(aID)")[0].decode(0, as: Int64.self)
            }
            #expect(seenByB == 0)
            let changedByB = try await database.asDevice(b) { tx in
                try tx.finalQuery("UPDATE poop_logs SET bristol_type = 1 WHERE device_id = \(aID)").rowsAffected
            }
            #expect(changedByB == 0)
            let forged = await #expect(throws: PostgresError.self) {
                try await database.asDevice(b) { tx in
                    try tx.finalQuery("INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type) VALUES (\(UUID()), \(aID), date_trunc('second', now()), 4)")
                }
            }
            #expect(forged?.sqlState == .insufficientPrivilege)

            // A profile (a reference table), then the erasure's first batch: the device stops, the profile goes.
            let subject = UUID()
            _ = try await UserRepository(database: database).ensureProfile(as: a, id: subject, email: "whole-life@example.com")
            let erasure = try await devices.erase(as: a, subject: subject, batch: 1)
            #expect(erasure == DeviceRepository.Erasure(logs: 1, profileErased: true, logsRemaining: 1))
            await #expect(throws: RepositoryError.deviceBeingErased) {
                _ = try await devices.register(DeviceInfo(model: "phone"), as: a, network: network)
            }
            await #expect(throws: RepositoryError.deviceNotRegistered) {
                _ = try await devices.rotate(as: a, to: try DeviceID(UUID()))
            }
            _ = try await PendingErasures(database: database).run(maxBatches: 10, until: .now + .seconds(30))
            #expect(try await devices.register(DeviceInfo(model: "phone 3"), as: a, network: network).created)
            #expect(try await id(a) != aID)
            #expect(try await devices.current(as: b)?.info.model == "tablet")

            // A live device rotates: its id, and so its shard and its log, stay; the old key is unknown.
            let bID = try await id(b)
            _ = try await database.asDevice(b) { tx in
                try tx.finalQuery("INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type) VALUES (\(UUID()), \(bID), date_trunc('second', now()), 2)")
            }
            let rotated = try DeviceID(UUID())
            _ = try await devices.rotate(as: b, to: rotated)
            #expect(try await id(rotated) == bID)
            #expect(try await devices.current(as: b) == nil)
            let kept = try await database.asDevice(rotated, readOnly: true) { tx in
                try tx.finalQuery("SELECT count(*) FROM poop_logs WHERE device_id = \(bID)")[0].decode(0, as: Int64.self)
            }
            #expect(kept == 1)

            // Erasure by email (support's path): the person's device, its log and the profile, from every node's view.
            let person = UUID()
            _ = try await UserRepository(database: database).ensureProfile(as: rotated, id: person, email: "by-email@example.com")
            let report = try await database.pool.withConnection { conn in
                try UserErasure().run(on: conn, email: "by-email@example.com", dryRun: false)
            }
            #expect(report == UserErasure.Report(users: 1, devices: 1, logs: 1))
            #expect(try await devices.current(as: rotated) == nil)
        }
    }
}
