import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

extension CitusTests {
    /// Our schema on the cluster: policies, triggers, routing, the key map, rebalancing and the migrations.
    @Suite("The schema on the cluster")
    struct Schema {
        /// Our policies were written `device_id = (SELECT get_current_device_id())`, for a value computed once per
        /// statement. Citus refuses to propagate a policy with a sub-select; the plain call is accepted.
        @Test func aPolicyWithASubSelectIsRefusedOnADistributedTable() async throws {
            try await CitusCluster.inSchema { conn, schema in
                try CitusCluster.script(conn, """
                    CREATE TABLE \(schema).logs (device text NOT NULL, id int NOT NULL, PRIMARY KEY (device, id));
                    SELECT create_distributed_table('\(schema).logs', 'device');
                    CREATE FUNCTION \(schema).current_device() RETURNS text LANGUAGE sql STABLE
                        AS $$SELECT current_setting('app.device_id', true)$$;
                    """)
                let refused = CitusCluster.error {
                    try conn.executeScript("CREATE POLICY own ON \(schema).logs USING (device = (SELECT \(schema).current_device()))")
                }
                #expect(refused?.contains("unexpected non-SELECT command in SubLink") == true, "\(refused ?? "no error")")
                try conn.executeScript("CREATE POLICY own ON \(schema).logs USING (device = \(schema).current_device())")
            }
        }

        /// The change-numbering trigger updates the device row from a log row. Citus refuses triggers on distributed
        /// tables unless `citus.enable_unsafe_triggers` is on; with it, a trigger on a shard updates the co-located
        /// shard of the other table (same device, same node).
        @Test func aTriggerOnADistributedTableNeedsUnsafeTriggersAndThenUpdatesTheColocatedShard() async throws {
            try await CitusCluster.inSchema { conn, schema in
                try CitusCluster.script(conn, """
                    CREATE TABLE \(schema).devices (device text PRIMARY KEY, writes int NOT NULL DEFAULT 0);
                    SELECT create_distributed_table('\(schema).devices', 'device');
                    CREATE TABLE \(schema).logs (device text NOT NULL, id int NOT NULL, PRIMARY KEY (device, id));
                    SELECT create_distributed_table('\(schema).logs', 'device', colocate_with => '\(schema).devices');
                    CREATE FUNCTION \(schema).count_write() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                        UPDATE \(schema).devices SET writes = writes + 1 WHERE device = NEW.device;
                        RETURN NEW;
                    END $$;
                    """)
                let refused = CitusCluster.error {
                    try conn.executeScript("CREATE TRIGGER count_write AFTER INSERT ON \(schema).logs FOR EACH ROW EXECUTE FUNCTION \(schema).count_write()")
                }
                #expect(refused?.contains("triggers are not supported on distributed tables") == true, "\(refused ?? "no error")")
                try conn.transaction { tx in
                    try CitusCluster.run(tx, "SET LOCAL citus.enable_unsafe_triggers = on",
                                         "CREATE TRIGGER count_write AFTER INSERT ON \(schema).logs FOR EACH ROW EXECUTE FUNCTION \(schema).count_write()")
                }
                try CitusCluster.script(conn, """
                    INSERT INTO \(schema).devices (device) VALUES ('a'), ('b');
                    INSERT INTO \(schema).logs VALUES ('a', 1);
                    INSERT INTO \(schema).logs VALUES ('a', 2);
                    INSERT INTO \(schema).logs VALUES ('b', 1);
                    """)
                let writes = try conn.executeScript("SELECT device, writes FROM \(schema).devices ORDER BY device")
                    .map { "\(try $0.decode(0, as: String.self))=\(try $0.decode(1, as: Int.self))" }
                #expect(writes == ["a=2", "b=1"])
            }
        }

        /// A policy must find the device from its secret key. A function that reads another table, even a reference
        /// table with a copy on every node, is refused inside a query on a shard ("cannot execute a distributed query
        /// from a query on a shard") unless that function allows nested execution; then the key is checked on the
        /// worker, from its local copy, and the policy holds both ways.
        @Test func aPolicyFunctionReadingAReferenceTableRunsOnTheShardsOnlyWithNestedExecutionAllowed() async throws {
            try await CitusCluster.inSchema { conn, schema in
                try CitusCluster.script(conn, """
                    CREATE TABLE \(schema).keys (key text PRIMARY KEY, device text NOT NULL);
                    SELECT create_reference_table('\(schema).keys');
                    INSERT INTO \(schema).keys VALUES ('secret-a', 'a'), ('secret-b', 'b');
                    CREATE TABLE \(schema).logs (device text NOT NULL, id int NOT NULL, PRIMARY KEY (device, id));
                    SELECT create_distributed_table('\(schema).logs', 'device');
                    ALTER TABLE \(schema).logs ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
                    CREATE FUNCTION \(schema).current_device() RETURNS text LANGUAGE sql STABLE
                        AS $$SELECT device FROM \(schema).keys WHERE key = current_setting('app.device_id', true)$$;
                    CREATE POLICY own ON \(schema).logs USING (device = \(schema).current_device())
                        WITH CHECK (device = \(schema).current_device());
                    """)
                let context = ["SET LOCAL citus.propagate_set_commands = 'local'", "SET LOCAL app.device_id = 'secret-a'"]
                let nested = CitusCluster.error {
                    try conn.transaction { tx in
                        try CitusCluster.run(tx, context)
                        try tx.executeScript("INSERT INTO \(schema).logs VALUES ('a', 1)")
                    }
                }
                #expect(nested?.contains("cannot execute a distributed query from a query on a shard") == true, "\(nested ?? "no error")")

                try conn.executeScript("ALTER FUNCTION \(schema).current_device() SET citus.allow_nested_distributed_execution = on")
                let seen = try conn.transaction { tx in
                    try CitusCluster.run(tx, context)
                    try tx.executeScript("INSERT INTO \(schema).logs VALUES ('a', 1)")
                    return try tx.executeScript("SELECT device FROM \(schema).logs WHERE device IN ('a', 'b')").map { try $0.decode(0, as: String.self) }
                }
                #expect(seen == ["a"])
                let forged = CitusCluster.error {
                    try conn.transaction { tx in
                        try CitusCluster.run(tx, context)
                        try tx.executeScript("INSERT INTO \(schema).logs VALUES ('b', 1)")
                    }
                }
                #expect(forged?.contains("row-level security policy") == true, "\(forged ?? "no error")")
            }
        }

        /// A statement that names the distribution column's value is routed to one shard (one task on one worker);
        /// without it, it goes to every shard. Every repository statement names its device for this reason.
        @Test func aStatementNamingItsDeviceRunsOnOneShard() async throws {
            try await CitusCluster.inSchema { conn, schema in
                try CitusCluster.script(conn, """
                    CREATE TABLE \(schema).logs (device text NOT NULL, id int NOT NULL, PRIMARY KEY (device, id));
                    SELECT create_distributed_table('\(schema).logs', 'device');
                    """)
                #expect(try CitusCluster.tasks(conn, "SELECT * FROM \(schema).logs WHERE device = 'a'") == 1)
                #expect(try CitusCluster.tasks(conn, "UPDATE \(schema).logs SET id = id WHERE device = 'a' AND id = 1") == 1)
                let shards = try conn.query("SELECT current_setting('citus.shard_count')::int")[0].decode(0, as: Int.self)
                #expect(try CitusCluster.tasks(conn, "SELECT * FROM \(schema).logs WHERE id = 1") == shards)
            }
        }

        /// A statement that finds its device through the key → id map (a reference table) is not routed: Citus knows
        /// the distribution value only after the lookup, so a read goes to every shard (the lookup in each) and an
        /// `INSERT … SELECT` is pulled to the coordinator and sent on from there; `VALUES ((SELECT …))` is refused. Only
        /// the id itself, as a constant in the statement, routes to one shard. So on Citus the service must send the
        /// device's id with its key: learned from the map once and kept (a stale id is harmless, the shard's policy
        /// checks the key against its own copy of the map).
        @Test func aStatementFindingItsDeviceThroughTheMapRunsOnEveryShard() async throws {
            try await CitusCluster.inSchema { conn, schema in
                try CitusCluster.script(conn, """
                    CREATE TABLE \(schema).map (key text PRIMARY KEY, device text NOT NULL UNIQUE);
                    SELECT create_reference_table('\(schema).map');
                    CREATE TABLE \(schema).logs (device text NOT NULL, id int NOT NULL, PRIMARY KEY (device, id));
                    SELECT create_distributed_table('\(schema).logs', 'device');
                    INSERT INTO \(schema).map VALUES ('k-a', 'a');
                    """)
                let shards = try conn.query("SELECT current_setting('citus.shard_count')::int")[0].decode(0, as: Int.self)
                let lookup = "(SELECT m.device FROM \(schema).map m WHERE m.key = 'k-a')"
                #expect(try CitusCluster.tasks(conn, "SELECT * FROM \(schema).logs WHERE device = \(lookup)") == shards)
                #expect(try CitusCluster.tasks(conn, "SELECT l.* FROM \(schema).logs l JOIN \(schema).map m ON m.device = l.device WHERE m.key = 'k-a'") == shards)
                let insert = try conn.executeScript("EXPLAIN (COSTS OFF) INSERT INTO \(schema).logs SELECT m.device, 1 FROM \(schema).map m WHERE m.key = 'k-a'")
                    .map { try $0.decode(0, as: String.self) }
                #expect(insert.contains { $0.contains("pull to coordinator") }, "\(insert)")
                let values = CitusCluster.error { try conn.executeScript("INSERT INTO \(schema).logs VALUES (\(lookup), 2)") }
                #expect(values?.contains("subqueries are not supported within INSERT queries") == true, "\(values ?? "no error")")
                // The id as a constant, beside the lookup (what the policy will check): one shard.
                #expect(try CitusCluster.tasks(conn, "SELECT * FROM \(schema).logs WHERE device = 'a' AND device = \(lookup)") == 1)
                #expect(try CitusCluster.tasks(conn, "INSERT INTO \(schema).logs VALUES ('a', 3)") == 1)
            }
        }

        /// Adding capacity: shards move between workers with writes going on, and nothing is lost. Two of the logs'
        /// shards are moved off one worker (one at a time: logical replication moves one per transaction), then
        /// `citus_rebalance_start()` moves shards back until both workers hold as many, while another connection keeps
        /// inserting (at most 20 s). Every row written before and every insert that was acknowledged is there after.
        @Test func aRebalanceWithWritesGoingOnLosesNothing() async throws {
            let url: String = try #require(CitusCluster.url)
            try await CitusCluster.inSchema { conn, schema in
                try CitusCluster.script(conn, """
                    SET citus.shard_count = 8;
                    CREATE TABLE \(schema).logs (device text NOT NULL, id int NOT NULL, PRIMARY KEY (device, id));
                    SELECT create_distributed_table('\(schema).logs', 'device');
                    RESET citus.shard_count;
                    INSERT INTO \(schema).logs SELECT 'd' || (g % 100), g FROM generate_series(1, 5000) g;
                    """)
                func placements() throws -> [Int] {
                    try conn.query("SELECT count(*)::int FROM citus_shards WHERE table_name = \(schema + ".logs")::regclass GROUP BY nodeport ORDER BY nodeport")
                        .map { try $0.decode(0, as: Int.self) }
                }
                #expect(try placements() == [4, 4])
                let from = try conn.query("SELECT nodename, nodeport FROM citus_shards WHERE table_name = \(schema + ".logs")::regclass ORDER BY nodeport LIMIT 1")[0]
                let (host, port) = (try from.decode(0, as: String.self), try from.decode(1, as: Int.self))
                let to = try conn.query("SELECT nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0 AND nodeport <> \(port)")[0].decode(0, as: Int.self)
                let moving = try conn.query("SELECT shardid FROM citus_shards WHERE table_name = \(schema + ".logs")::regclass AND nodeport = \(port) ORDER BY shardid LIMIT 2")
                    .map { try $0.decode(0, as: Int64.self) }
                for shard in moving {
                    try conn.query("SELECT citus_move_shard_placement(\(shard), \(host), \(port), \(host), \(to))")
                }
                #expect(try placements() == [2, 6])

                // Writes during the rebalance, on a connection (and a thread) of their own.
                let stop = Locked(false)
                let outcome = Locked<(acknowledged: [Int], failed: Int, error: String?)>(([], 0, nil))
                let done = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    defer { done.signal() }
                    do {
                        let writes = try Connection(configuration: ConnectionConfiguration(connectionString: url))
                        var id = 100_000
                        let deadline = ContinuousClock.now + .seconds(20)
                        while !stop.value, ContinuousClock.now < deadline {
                            id += 1
                            do {
                                try writes.query("INSERT INTO \(unescaped: schema).logs VALUES (\("d" + String(id % 100)), \(id))")
                                outcome.withLock { $0.acknowledged.append(id) }
                            } catch {
                                outcome.withLock { $0.failed += 1 }
                            }
                            Thread.sleep(forTimeInterval: 0.005)
                        }
                    } catch {
                        outcome.withLock { $0.error = "\(error)" }
                    }
                }
                let started = ContinuousClock.now
                try conn.query("SELECT citus_rebalance_start()")
                try conn.query("SELECT citus_rebalance_wait()")
                let took = ContinuousClock.now - started
                stop.withLock { $0 = true }
                done.wait()
                let (acknowledged, failed, writerError) = outcome.value
                #expect(writerError == nil, "\(writerError ?? "")")
                #expect(try placements() == [4, 4])
                let ids = Set(try conn.query("SELECT id FROM \(unescaped: schema).logs WHERE id > 100000").map { try $0.decode(0, as: Int.self) })
                #expect(acknowledged.count > 0)
                #expect(acknowledged.allSatisfy(ids.contains), "lost: \(acknowledged.filter { !ids.contains($0) })")
                #expect(try conn.query("SELECT count(*) FROM \(unescaped: schema).logs WHERE id <= 5000")[0].decode(0, as: Int.self) == 5000)
                print("citus rebalance: 2 shards moved back in \(took), \(acknowledged.count) inserts acknowledged meanwhile, \(failed) failed")
            }
        }

        /// The key → id map must be written from the coordinator, never from a trigger on a devices shard: that needs
        /// nested execution, and a transaction over both workers then crashed them (signal 11 at COMMIT PREPARED) and
        /// left the map's copies disagreeing (docs/scaling.md). Written by a function the coordinator runs, in the
        /// same transaction as the devices it maps, over both workers: every copy holds every key, and a key already
        /// taken (23505 from the map) takes the device's row back with it.
        @Test func theKeyMapWrittenFromTheCoordinatorAgreesOnEveryNode() async throws {
            try await CitusCluster.inSchema { conn, schema in
                try CitusCluster.script(conn, """
                    CREATE TABLE \(schema).map (key text PRIMARY KEY, device text NOT NULL UNIQUE);
                    SELECT create_reference_table('\(schema).map');
                    CREATE TABLE \(schema).devices (device text PRIMARY KEY, model text NOT NULL);
                    SELECT create_distributed_table('\(schema).devices', 'device');
                    CREATE FUNCTION \(schema).register(p_key text, p_device text) RETURNS void LANGUAGE plpgsql AS $$
                    BEGIN
                        INSERT INTO \(schema).map VALUES (p_key, p_device);
                        INSERT INTO \(schema).devices VALUES (p_device, 'phone');
                    END $$;
                    """)
                let devices = (1...12).map { "d\($0)" }
                // Twelve devices land on shards of both workers.
                let workers = try conn.query("""
                    SELECT count(DISTINCT p.nodeport) FROM unnest(string_to_array(\(devices.joined(separator: ",")), ',')) AS d(device),
                        LATERAL (SELECT get_shard_id_for_distribution_column('\(unescaped: schema).devices', d.device) AS shard) s
                        JOIN pg_dist_placement pl ON pl.shardid = s.shard JOIN pg_dist_node p ON p.groupid = pl.groupid
                    """)[0].decode(0, as: Int.self)
                #expect(workers == 2)
                try conn.transaction { tx in
                    for device in devices { try tx.query("SELECT \(unescaped: schema).register(\("k-" + device), \(device))") }
                }
                let copies = try conn.query("SELECT result FROM run_command_on_placements('\(unescaped: schema).map', 'SELECT count(*) FROM %s')")
                    .map { try $0.decode(0, as: String.self) }
                #expect(copies == ["12", "12", "12"], "\(copies)")
                #expect(try conn.query("SELECT count(*) FROM \(unescaped: schema).devices")[0].decode(0, as: Int.self) == 12)
                let taken = CitusCluster.error { try conn.query("SELECT \(unescaped: schema).register('k-d1', 'd99')") }
                #expect(taken?.contains("23505") == true || taken?.contains("duplicate key") == true, "\(taken ?? "no error")")
                #expect(try conn.query("SELECT count(*) FROM \(unescaped: schema).devices WHERE device = 'd99'")[0].decode(0, as: Int.self) == 0)
                let after = try conn.query("SELECT result FROM run_command_on_placements('\(unescaped: schema).map', 'SELECT count(*) FROM %s')")
                    .map { try $0.decode(0, as: String.self) }
                #expect(after == ["12", "12", "12"], "\(after)")
            }
        }

        /// `poopypals migrate` on a Citus coordinator with two workers applies every migration, in a database of its
        /// own (`scripts/citus.sh createdb`). It stopped at sql/0010: Citus ran the migrations' statements on the
        /// workers too, as the NOLOGIN role they had switched to ("role … is not permitted to log in"). The migrations
        /// written for one PostgreSQL (up to `Migrator.lastSingleNodeVersion`) run with Citus's DDL propagation off,
        /// as the coordinator's own tables; then sql/0031 distributes them by device: devices, logs and tombstones
        /// hashed by the device's id and co-located, users, the key map and the buckets reference tables, and the
        /// service's roles able to log in, on every node.
        @Test func poopypalsMigrateAppliesEveryMigrationOnTheCoordinator() async throws {
            let name = "citus_m_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
            let url = try await CitusCluster.createDatabase(name)
            do {
                let first = try await TestProject.run(["migrate", "--database-url", url], timeout: .seconds(120))
                #expect(first.status == 0, "\(first.stdout)\n\(first.stderr)")
                let latest = try MigrationFile.load(directory: TestProject.migrationsDirectory).map(\.version).max() ?? 0
                #expect(first.stdout.contains("the database is at version \(latest)"), "\(first.stdout)")
                let again = try await TestProject.run(["migrate", "--database-url", url], timeout: .seconds(60))
                #expect(again.status == 0 && again.stdout.contains("Nothing to apply"), "\(again.stdout)\n\(again.stderr)")
                let conn = try Connection(configuration: ConnectionConfiguration(connectionString: url))
                #expect(try conn.query("SELECT max(version) FROM schema_migrations")[0].decode(0, as: Int64.self) == latest)
                // The service's roles: this database's, able to log in (Citus reaches the workers as them), on every node.
                let roles = try conn.query("SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname IN (poopypals_service_role(), poopypals_profiles_role())")
                #expect(roles.count == 2)
                #expect(try roles.allSatisfy { try $0.decode("rolcanlogin", as: Bool.self) })
                let onWorkers = try conn.query("""
                    SELECT result FROM run_command_on_workers(format('SELECT count(*) FROM pg_roles WHERE rolname LIKE %L AND rolcanlogin', 'poopypals%' || \(name)))
                    """).map { try $0.decode(0, as: String.self) }
                #expect(onWorkers == ["2", "2"], "\(onWorkers)")
                // The migrator's session is back to Citus's default.
                #expect(try conn.query("SHOW citus.enable_ddl_propagation")[0].decode(0, as: String.self) == "on")
                // sql/0031: the device's tables hashed by its id, in one co-location group; the rest reference tables
                // (sql/0033's erasing keys too).
                let kinds = try conn.query("""
                    SELECT logicalrelid::text || ' ' || partmethod::text || ' ' || coalesce(column_to_column_name(logicalrelid, partkey), '-')
                    FROM pg_dist_partition ORDER BY 1
                    """).map { try $0.decode(0, as: String.self) }
                #expect(kinds == ["device_key_map n -", "devices h id", "erasing_device_keys n -", "poop_log_tombstones h device_id", "poop_logs h device_id",
                                  "registration_buckets n -", "users n -"], "\(kinds)")
                let groups = try conn.query("""
                    SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE partmethod = 'h'
                    """)[0].decode(0, as: Int.self)
                #expect(groups == 1)
            } catch {
                try? await CitusCluster.dropDatabase(name)
                throw error
            }
            try await CitusCluster.dropDatabase(name)
            // Gone with its roles, from every node.
            let clusterURL = try #require(CitusCluster.url)
            let cluster = try Connection(configuration: ConnectionConfiguration(connectionString: clusterURL))
            let left = try cluster.query("""
                SELECT count(*)::text FROM pg_roles WHERE rolname LIKE 'poopypals%' || \(name)
                UNION ALL SELECT result FROM run_command_on_workers(format('SELECT count(*) FROM pg_roles WHERE rolname LIKE %L', 'poopypals%' || \(name)))
                """).map { try $0.decode(0, as: String.self) }
            #expect(left == ["0", "0", "0"], "\(left)")
        }
    }
}
