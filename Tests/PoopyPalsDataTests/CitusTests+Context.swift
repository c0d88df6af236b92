import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

extension CitusTests {
    /// The request's context on the cluster: what reaches a worker of the settings, the role and the statements a
    /// request transaction sends, and who may reach the nodes.
    @Suite("The request context on the workers")
    struct Context {
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
    }
}
