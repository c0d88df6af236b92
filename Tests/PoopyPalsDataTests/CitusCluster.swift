import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

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

    /// A database of its own (`prefix` and a random suffix) that `poopypals migrate` distributed, with a pool of the
    /// app's owner on it: `body` gets its name, URL and the pool; the pool is closed and the database dropped after.
    static func withMigratedDatabase<T: Sendable>(
        _ prefix: String, maxConnections: Int = 2, upTo target: Int? = nil, _ body: @Sendable (_ name: String, _ url: String, ConnectionPool) async throws -> T
    ) async throws -> T {
        let name = prefix + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let url = try await createDatabase(name)
        let pool = ConnectionPool(configuration: .init(connection: ConnectionConfiguration(connectionString: url, applicationName: "poopypals-tests"),
                                                       maxConnections: maxConnections))
        let value: T
        do {
            let migrated = try await TestProject.run(["migrate", "up", "--database-url", url] + (target.map { ["--target", "\($0)"] } ?? []),
                                                     timeout: .seconds(120))
            try #require(migrated.status == 0, "\(migrated.stdout)\n\(migrated.stderr)")
            value = try await body(name, url, pool)
        } catch {
            await pool.close()
            try? await dropDatabase(name)
            throw error
        }
        await pool.close()
        try await dropDatabase(name)
        return value
    }

    /// The coordinator's superuser on database `name` (over the nodes' private sockets): it bypasses row-level security.
    static func superuser(_ name: String, url: String) throws -> ConnectionPool {
        ConnectionPool(configuration: .init(connection: ConnectionConfiguration(
            connectionString: try superuserURL(name, url: url), applicationName: "poopypals-tests"), maxConnections: 1))
    }

    static func superuserURL(_ name: String, url: String) throws -> String {
        let port = try #require(URLComponents(string: url)?.port)
        let sockets = try #require(sockets)
        return "postgresql:///\(name)?host=\(sockets)&port=\(port)&user=postgres"
    }

    /// Returns once a session of the cluster waits on a lock held by another (`citus_lock_waits`, every node's waits:
    /// on the coordinator a statement waiting on a worker shows no lock wait of its own); throws after `timeout`, or
    /// as soon as `unless` (the waiter finished without having been seen waiting).
    static func waitUntilASessionWaitsOnALock(superuser url: String, timeout: Duration = .seconds(30),
                                              unless: @Sendable () -> Bool) async throws {
        let conn = try Connection(configuration: ConnectionConfiguration(connectionString: url))
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if unless() { throw SetupError("what was to wait on a lock finished before it was seen waiting") }
            if try conn.query("SELECT count(*) FROM citus_lock_waits")[0].decode(0, as: Int.self) > 0 { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw SetupError("no session waited on a lock within \(timeout)")
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
