import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// What a real Citus cluster (scripts/citus.sh: a coordinator and two workers) does with the mechanisms our schema
/// and request context rest on: the facts docs/scaling.md's plan assumed, each checked here (issue 45). They hold
/// or fail on Citus itself, so a Citus upgrade that changes one fails here first. Each test works in a schema of its
/// own on the coordinator, as the app's non-superuser owner (`POOPYPALS_TEST_CITUS_URL`, from `scripts/citus.sh url`).
@Suite("Citus: what the cluster carries to its workers", .serialized, .enabled(if: CitusCluster.url != nil, "needs POOPYPALS_TEST_CITUS_URL (scripts/citus.sh url)"))
struct CitusTests {
    /// The plan said `set_config('app.device_id', …, true)` travels with each distributed transaction. It does
    /// not: the worker's policy sees no device and refuses the device's own row. `SET LOCAL`, with
    /// `citus.propagate_set_commands = 'local'`, is carried, and the policy then holds on the shard both ways.
    @Test func aSettingMadeWithSetConfigNeverReachesAWorkerButSetLocalDoes() async throws {
        try await CitusCluster.inSchema { conn, schema in
            try CitusCluster.createDeviceLogs(conn, in: schema)
            let refused = CitusCluster.error {
                try conn.transaction { tx in
                    try tx.query("SELECT set_config('app.device_id', 'a', true)")
                    try tx.executeScript("INSERT INTO \(schema).logs VALUES ('a', 1)")
                }
            }
            #expect(refused?.contains("row-level security policy") == true, "\(refused ?? "no error")")

            for device in ["a", "b"] {
                try conn.transaction { tx in
                    try CitusCluster.run(tx, "SET LOCAL citus.propagate_set_commands = 'local'", "SET LOCAL app.device_id = '\(device)'")
                    try tx.executeScript("INSERT INTO \(schema).logs VALUES ('\(device)', 1)")
                }
            }
            let seen = try conn.transaction { tx in
                try CitusCluster.run(tx, "SET LOCAL citus.propagate_set_commands = 'local'", "SET LOCAL app.device_id = 'a'")
                return try tx.executeScript("SELECT device FROM \(schema).logs").map { try $0.decode(0, as: String.self) }
            }
            #expect(seen == ["a"])
            let forged = CitusCluster.error {
                try conn.transaction { tx in
                    try CitusCluster.run(tx, "SET LOCAL citus.propagate_set_commands = 'local'", "SET LOCAL app.device_id = 'a'")
                    try tx.executeScript("INSERT INTO \(schema).logs VALUES ('b', 2)")
                }
            }
            #expect(forged?.contains("row-level security policy") == true, "\(forged ?? "no error")")
        }
    }

    /// The shape docs/scaling.md step 4 settles on keeps the constant settings prepared, as the service's other
    /// statements are: a `SET LOCAL` sent through the extended protocol as a named prepared statement (our client's
    /// cache), and executed again in a later transaction, is carried to the worker as one sent as text: the
    /// device's insert passes its shard's policy in both transactions, a read as that device sees its rows only,
    /// and a row of another device is refused.
    @Test func aSetLocalPreparedOnceIsCarriedToTheWorkerInEveryLaterTransaction() async throws {
        try await CitusCluster.inSchema { conn, schema in
            try CitusCluster.createDeviceLogs(conn, in: schema)
            let propagate = PostgresQuery(unsafeSQL: "SET LOCAL citus.propagate_set_commands = 'local'")
            let device = PostgresQuery(unsafeSQL: "SET LOCAL app.device_id = 'a'")
            for id in 1...2 {
                try conn.transaction { tx in
                    try tx.query(propagate)
                    try tx.query(device)
                    try tx.query("INSERT INTO \(unescaped: schema).logs VALUES ('a', \(id))")
                }
            }
            let prepared = try conn.query("""
                SELECT count(*)::int FROM pg_prepared_statements
                WHERE statement IN ('SET LOCAL app.device_id = ''a''', 'SET LOCAL citus.propagate_set_commands = ''local''')
                """)[0].decode(0, as: Int.self)
            #expect(prepared == 2, "the SET LOCAL statements went through the statement cache")
            let seen = try conn.transaction { tx in
                try tx.query(propagate)
                try tx.query(device)
                return try tx.query("SELECT device, id FROM \(unescaped: schema).logs ORDER BY id").map {
                    "\(try $0.decode(0, as: String.self))\(try $0.decode(1, as: Int.self))"
                }
            }
            #expect(seen == ["a1", "a2"])
            let forged = CitusCluster.error {
                try conn.transaction { tx in
                    try tx.query(propagate)
                    try tx.query(device)
                    try tx.query("INSERT INTO \(unescaped: schema).logs VALUES ('b', 3)")
                }
            }
            #expect(forged?.contains("row-level security policy") == true, "\(forged ?? "no error")")
        }
    }

    /// The plan had each transaction switch to a NOLOGIN service role. Citus opens its connections to the workers
    /// as the role the transaction switched to, so that role must be able to log in to every worker. Here the nodes
    /// reach each other over a socket folder only the cluster's own user can enter (scripts/citus.sh), so a LOGIN
    /// role without a password serves, and still cannot log in over TCP.
    @Test func aWorkerIsReachedAsTheRoleTheTransactionSwitchedTo() async throws {
        try await CitusCluster.inSchema { conn, schema in
            let role = "\(schema)_service"
            try CitusCluster.script(conn, """
                CREATE TABLE \(schema).logs (device text NOT NULL, id int NOT NULL, PRIMARY KEY (device, id));
                SELECT create_distributed_table('\(schema).logs', 'device');
                """)
            defer { _ = try? CitusCluster.run(conn, "DROP OWNED BY \(role)", "DROP ROLE \(role)") }
            try CitusCluster.script(conn, """
                CREATE ROLE \(role) NOLOGIN;
                GRANT \(role) TO CURRENT_USER;
                GRANT USAGE ON SCHEMA \(schema) TO \(role);
                GRANT SELECT ON \(schema).logs TO \(role);
                """)
            let asTheRole = {
                try conn.transaction { tx in
                    try tx.query("SELECT set_config('role', \(role), true)")
                    return try tx.executeScript("SELECT count(*) FROM \(schema).logs WHERE device = 'a'")[0].decode(0, as: Int.self)
                }
            }
            let switched = CitusCluster.error { _ = try asTheRole() }
            #expect(switched?.contains("role \"\(role)\" is not permitted to log in") == true, "\(switched ?? "no error")")

            try CitusCluster.run(conn, "ALTER ROLE \(role) LOGIN")
            #expect(try asTheRole() == 0)
            // Over TCP the role has no password to give.
            let citusURL = try #require(CitusCluster.url)
            var components = try #require(URLComponents(string: citusURL))
            components.user = role
            components.password = nil
            let url = try #require(components.string)
            let login = CitusCluster.error { _ = try Connection(configuration: ConnectionConfiguration(connectionString: url)) }
            #expect(login?.contains("password") == true, "\(login ?? "no error")")
        }
    }

    /// The service's own request transaction on a Citus coordinator (issue 45, "the request context in a form Citus
    /// carries"): `Database` finds the `citus` extension and sends, in the request's one pipeline, the context as
    /// `SET LOCAL` statements besides its `set_config` one. A shard's policy (on a worker) admits a row only when it
    /// sees the device's key and every time limit, quota and write-bucket setting the coordinator set; a read sees
    /// the device's own rows only; a request of one statement is one round trip; the constant statements are
    /// prepared once, the device's never kept. The same transaction without them is refused on the worker.
    @Test func theRequestTransactionCarriesItsWholeContextToTheWorkers() async throws {
        let name = "citus_c_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let url = try await CitusCluster.createDatabase(name)
        let pool = ConnectionPool(configuration: .init(connection: ConnectionConfiguration(connectionString: url, applicationName: "poopypals-tests"),
                                                       maxConnections: 1))
        do {
            let migrated = try await TestProject.run(["migrate", "--database-url", url], timeout: .seconds(120))
            try #require(migrated.status == 0, "\(migrated.stdout)\n\(migrated.stderr)")
            let seen = "concat_ws('/', current_setting('statement_timeout'), current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout'), current_setting('poopypals.max_logs_per_device', true), current_setting('poopypals.max_tombstones_per_device', true), current_setting('poopypals.device_write_burst', true), current_setting('poopypals.device_write_rate', true))"
            try await pool.withConnection { conn in
                // The service role as a distributed schema will need it (docs/scaling.md step 3): LOGIN, on every node.
                let role = try conn.query("SELECT poopypals_service_role()")[0].decode(0, as: String.self)
                try CitusCluster.run(conn, "ALTER ROLE \(role) LOGIN")
                try CitusCluster.run(conn, "SELECT run_command_on_workers('CREATE ROLE \(role) LOGIN')")
                try CitusCluster.script(conn, """
                    CREATE TABLE ctx_probe (device uuid NOT NULL, seen text NOT NULL, PRIMARY KEY (device, seen));
                    SELECT create_distributed_table('ctx_probe', 'device');
                    ALTER TABLE ctx_probe ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
                    CREATE POLICY own ON ctx_probe USING (device = NULLIF(current_setting('app.device_id', true), '')::uuid)
                        WITH CHECK (device = NULLIF(current_setting('app.device_id', true), '')::uuid AND seen = \(seen));
                    GRANT SELECT, INSERT ON ctx_probe TO \(role);
                    """)
            }
            let database = Database(pool: pool, timeouts: RequestTimeouts(statement: .milliseconds(4321), lock: .milliseconds(1234)),
                                    quotas: DeviceQuotas(maxLogs: 777, maxTombstones: 555), rates: RateLimits(writeBurst: 33, writesPerSecond: 7))
            let devices = try [DeviceID(UUID()), DeviceID(UUID())]
            let write = { @Sendable (device: DeviceID) in
                try await database.asDevice(device) { tx in
                    // What the coordinator's context holds, written where only a worker's policy can check it.
                    let here = try tx.query("SELECT \(unescaped: seen)")[0].decode(0, as: String.self)
                    try tx.finalQuery("INSERT INTO ctx_probe VALUES (\(device.key), \(here))")
                    return here
                }
            }
            let written = try await write(devices[0])
            #expect(written.hasSuffix("/777/555/33/7"), "\(written)")
            _ = try await write(devices[1])

            // One statement, one round trip (the Citus question was asked at the first request, and kept).
            let before = try await pool.withConnection { $0.roundTrips }
            let read = try await database.asDevice(devices[0], readOnly: true) { tx in
                try tx.finalQuery("SELECT device, seen FROM ctx_probe").map { try $0.decode(0, as: UUID.self) }
            }
            #expect(try await pool.withConnection { $0.roundTrips } - before == 1)
            #expect(read == [devices[0].key])
            let prepared = try await pool.withConnection { conn in
                try conn.query("""
                    SELECT count(*) FILTER (WHERE statement LIKE 'SET LOCAL app.device_id%')::int,
                           count(*) FILTER (WHERE statement LIKE 'SET LOCAL poopypals.max_logs_per_device%')::int
                    FROM pg_prepared_statements
                    """).map { [try $0.decode(0, as: Int.self), try $0.decode(1, as: Int.self)] }.first
            }
            #expect(prepared == [0, 1], "the device's SET LOCAL is a one-off, the constants are prepared: \(prepared ?? [])")

            // Without the SET LOCAL statements, the same transaction (a row the policy would admit, read as above, for
            // a device of its own): the worker sees neither the device nor the settings, and refuses it.
            let stranger = try DeviceID(UUID())
            let refused: PostgresError? = try await pool.withConnection { conn in
                let tx = DeviceTransaction(connection: conn, device: stranger, settings: database.contextSettings)
                do {
                    let here = try tx.query("SELECT \(unescaped: seen)")[0].decode(0, as: String.self)
                    try tx.finalQuery("INSERT INTO ctx_probe VALUES (\(stranger.key), \(here))")
                    return nil
                } catch {
                    _ = try? conn.executeScript("ROLLBACK")
                    return PostgresError.find(in: error)
                }
            }
            #expect(refused?.sqlState == .insufficientPrivilege, "\(refused.map { "\($0)" } ?? "no error")")
        } catch {
            await pool.close()
            try? await CitusCluster.dropDatabase(name)
            throw error
        }
        await pool.close()
        try await CitusCluster.dropDatabase(name)
    }

    /// The nodes trust whoever reaches their socket folder (scripts/citus.sh): that folder must be the cluster
    /// owner's alone, and another local user must not get in through it.
    @Test(.enabled(if: CitusCluster.sockets != nil, "needs POOPYPALS_TEST_CITUS_SOCKETS (scripts/citus.sh socket-dir)"))
    func theNodesSocketFolderIsTheClusterOwnersAlone() throws {
        let folder = try #require(CitusCluster.sockets)
        let attributes = try FileManager.default.attributesOfItem(atPath: folder)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o700)
        #expect(attributes[.type] as? FileAttributeType == .typeDirectory)
        guard getuid() == 0 else { return }
        #expect(attributes[.ownerAccountName] as? String == "postgres")
        // As another user (nobody), psql cannot reach the coordinator's socket.
        let url = try #require(CitusCluster.url)
        let port = try #require(URLComponents(string: url)?.port)
        let psql = Process()
        psql.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
        psql.arguments = ["-u", "nobody", "--", "psql", "-X", "-h", folder, "-p", String(port), "-U", "postgres", "-d", "poopypals", "-c", "SELECT 1"]
        let output = Pipe()
        psql.standardOutput = output
        psql.standardError = output
        try psql.run()
        let said = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        psql.waitUntilExit()
        #expect(psql.terminationStatus != 0, "\(said)")
        #expect(said.contains("Permission denied"), "\(said)")
    }

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
    /// written for one PostgreSQL (up to `Migrator.lastSingleNodeVersion`) now run with Citus's DDL propagation off,
    /// as the coordinator's own tables: nothing reaches a worker, and the service's roles stay NOLOGIN.
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
            // The service's roles: this database's, NOLOGIN on the coordinator, and absent from the workers.
            let roles = try conn.query("SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname IN (poopypals_service_role(), poopypals_profiles_role())")
            #expect(roles.count == 2)
            #expect(try roles.allSatisfy { try !$0.decode("rolcanlogin", as: Bool.self) })
            let onWorkers = try conn.query("""
                SELECT result FROM run_command_on_workers(format('SELECT count(*) FROM pg_roles WHERE rolname LIKE %L', 'poopypals%' || \(name)))
                """).map { try $0.decode(0, as: String.self) }
            #expect(onWorkers == ["0", "0"], "\(onWorkers)")
            // The migrator's session is back to Citus's default after the last one-node migration.
            #expect(try conn.query("SHOW citus.enable_ddl_propagation")[0].decode(0, as: String.self) == "on")
            // sql/0028, policies a shard can run: users (refused while its device policies had a sub-select,
            // "Subqueries are not supported in policies on distributed tables") and the key map become reference
            // tables, as the owner; rolled back.
            try conn.executeScript("BEGIN; SELECT create_reference_table('users'); SELECT create_reference_table('device_key_map')")
            let kinds = try conn.query("""
                SELECT logicalrelid::text || ' ' || partmethod::text FROM pg_dist_partition
                WHERE logicalrelid IN ('users'::regclass, 'device_key_map'::regclass) ORDER BY 1
                """).map { try $0.decode(0, as: String.self) }
            #expect(kinds == ["device_key_map n", "users n"], "\(kinds)")
            try conn.executeScript("ROLLBACK")
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

/// The Citus coordinator the tests may use, and helpers for them.
enum CitusCluster {
    static var url: String? {
        ProcessInfo.processInfo.environment["POOPYPALS_TEST_CITUS_URL"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// A Citus database of its own, on every node, the workers registered (`scripts/citus.sh createdb`): its URL.
    static func createDatabase(_ name: String) async throws -> String {
        let made = try await TestProject.run(["createdb", name], executable: TestProject.root.appendingPathComponent("scripts/citus.sh"),
                                             timeout: .seconds(120))
        guard made.status == 0, let url = made.stdout.split(separator: "\n").last.map(String.init), url.hasPrefix("postgresql://") else {
            throw SetupError("scripts/citus.sh createdb \(name) failed: \(made.stderr)")
        }
        return url
    }

    static func dropDatabase(_ name: String) async throws {
        let dropped = try await TestProject.run(["dropdb", name], executable: TestProject.root.appendingPathComponent("scripts/citus.sh"),
                                                timeout: .seconds(120))
        guard dropped.status == 0 else { throw SetupError("scripts/citus.sh dropdb \(name) failed: \(dropped.stderr)") }
    }

    static var sockets: String? {
        ProcessInfo.processInfo.environment["POOPYPALS_TEST_CITUS_SOCKETS"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Runs `body` on a connection to the coordinator in a schema of its own, dropped afterwards (on every node:
    /// Citus propagates it).
    static func inSchema(_ body: @escaping @Sendable (Connection, String) throws -> Void) async throws {
        let url = try #require(url)
        let pool = ConnectionPool(configuration: .init(connection: ConnectionConfiguration(connectionString: url, applicationName: "poopypals-tests"),
                                                       maxConnections: 1))
        let schema = "citus_t_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        do {
            try await pool.withConnection { conn in
                try conn.executeScript("CREATE SCHEMA \(schema)")
                defer { _ = try? conn.executeScript("DROP SCHEMA \(schema) CASCADE") }
                try body(conn, schema)
            }
        } catch {
            await pool.close()
            throw error
        }
        await pool.close()
    }

    /// `schema.logs (device, id)`, distributed by device, under a forced policy keyed on `app.device_id`: the
    /// smallest table that shows whether a setting reaches the worker (its policy refuses the row otherwise).
    static func createDeviceLogs(_ conn: Connection, in schema: String) throws {
        try script(conn, """
            CREATE TABLE \(schema).logs (device text NOT NULL, id int NOT NULL, PRIMARY KEY (device, id));
            SELECT create_distributed_table('\(schema).logs', 'device');
            ALTER TABLE \(schema).logs ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
            CREATE POLICY own ON \(schema).logs USING (device = current_setting('app.device_id', true))
                WITH CHECK (device = current_setting('app.device_id', true));
            """)
    }

    /// Runs each statement on its own (a multi-statement script is one transaction, and Citus refuses some DDL
    /// after a parallel operation on a distributed table in the same transaction).
    static func run(_ conn: Connection, _ statements: String...) throws {
        try run(conn, statements)
    }

    static func run(_ conn: Connection, _ statements: [String]) throws {
        for statement in statements { _ = try conn.executeScript(statement) }
    }

    /// `script`'s statements, one by one: split at a semicolon that ends a line outside a dollar-quoted body.
    static func script(_ conn: Connection, _ script: String) throws {
        var statements: [String] = []
        var current = ""
        var inBody = false
        for line in script.split(separator: "\n", omittingEmptySubsequences: false) {
            current += line + "\n"
            if line.components(separatedBy: "$$").count % 2 == 0 { inBody.toggle() }
            if !inBody && line.trimmingCharacters(in: .whitespaces).hasSuffix(";") {
                statements.append(current)
                current = ""
            }
        }
        if !current.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { statements.append(current) }
        try run(conn, statements)
    }

    /// The message of the error `body` throws, or nil when it succeeds.
    static func error(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return PostgresError.find(in: error)?.message ?? "\(error)"
        }
    }

    /// How many tasks (shard queries) Citus plans for `sql`.
    static func tasks(_ conn: Connection, _ sql: String) throws -> Int? {
        let plan = try conn.executeScript("EXPLAIN (COSTS OFF) " + sql).map { try $0.decode(0, as: String.self) }
        return plan.lazy.compactMap { line -> Int? in
            guard let range = line.range(of: "Task Count: ") else { return nil }
            return Int(line[range.upperBound...].trimmingCharacters(in: .whitespaces))
        }.first
    }
}
