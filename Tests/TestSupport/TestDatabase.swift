import Foundation
import PoopyPalsData
import PostgresClient

/// What the environment offers beyond `DATABASE_URL`. `make test` provides everything for its own servers;
/// against an external server (only `DATABASE_URL`) the tests that need more are not run, and
/// `scripts/test.sh` says which.
public enum TestEnvironment {
    /// `PGBOUNCER_URL`: PgBouncer in transaction-pooling mode in front of the server.
    public static var hasPgBouncer: Bool { ProcessInfo.processInfo.environment["PGBOUNCER_URL"]?.isEmpty == false }
    /// `POOPYPALS_TEST_SUPERUSER_URL`: a superuser login on the same server.
    public static var hasSuperuser: Bool { ProcessInfo.processInfo.environment["POOPYPALS_TEST_SUPERUSER_URL"]?.isEmpty == false }
    /// `POOPYPALS_TEST_EXTENSION`: an extension every test database gets (as the superuser) before its test runs:
    /// `citus`, for the suites on a Citus coordinator (scripts/test.sh), where the service then sends its context in
    /// the form Citus carries to workers.
    public static var extensionInEveryDatabase: String? {
        ProcessInfo.processInfo.environment["POOPYPALS_TEST_EXTENSION"].flatMap { $0.range(of: "^[a-z_]+$", options: .regularExpression) == nil ? nil : $0 }
    }
    /// `POOPYPALS_TEST_CITUS_DISTRIBUTED=1`: `DATABASE_URL` is the coordinator of `scripts/citus.sh`'s cluster, and every
    /// migrated test database is made on each of its nodes (`scripts/citus.sh createdb`) and migrated there, so that
    /// `poopypals migrate` distributes it by device (sql/0031): the suites then run on the distributed schema.
    public static var distributesEveryDatabase: Bool {
        ProcessInfo.processInfo.environment["POOPYPALS_TEST_CITUS_DISTRIBUTED"] == "1"
    }
}

/// A database of a test's own, created from `DATABASE_URL` and dropped afterwards, so tests run in parallel.
public struct TestDatabase: Sendable {
    public let name: String
    public let configuration: ConnectionConfiguration

    /// The server the tests use. `make test` starts one and sets `DATABASE_URL`; without it, tests fail
    /// loudly rather than skip.
    public static func serverConfiguration() throws -> ConnectionConfiguration {
        guard let url = ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty else {
            throw SetupError("DATABASE_URL is not set: run the tests with `make test`, which starts PostgreSQL")
        }
        // 30 s to connect, not libpq's 10: a local server that takes longer is a machine too busy, not a failure
        // (CI once saw eighteen tests fail at once, each connecting for 10 s to a server sixty suites were using).
        var configuration = ConnectionConfiguration(connectionString: url, applicationName: "poopypals-tests",
                                                    connectTimeoutSeconds: 30)
        if ProcessInfo.processInfo.environment["POOPYPALS_STATEMENT_CACHE"] == "off" { configuration.statementCache = false }
        return configuration
    }

    /// Creates a fresh, empty database, runs `body`, then drops it (also when `body` throws).
    ///
    /// The migrated template is built first: it creates the cluster-wide roles (`poopypals_app`,
    /// `poopypals_profiles`, which sql/0022 later empties). Two first-ever migrations racing to create a role on a fresh cluster can fail in
    /// PostgreSQL itself (the loser's role cache still says "does not exist" after the winner committed), which
    /// a test migrating a fresh database beside the template build once did.
    @discardableResult
    public static func with<T: Sendable>(
        _ body: @Sendable (TestDatabase) async throws -> T
    ) async throws -> T {
        _ = try await MigratedTemplate.shared.name()
        return try await with(template: nil, body)
    }

    /// Like `with`, but the database starts with every migration in sql/ applied (copied from a template
    /// that is built once per test process).
    @discardableResult
    public static func withMigrated<T: Sendable>(
        _ body: @Sendable (TestDatabase) async throws -> T
    ) async throws -> T {
        if TestEnvironment.distributesEveryDatabase { return try await withDistributed(body) }
        return try await with(template: MigratedTemplate.shared.name(), body)
    }

    /// A database on every node of the Citus cluster, migrated (and so distributed): no template (a Citus database
    /// cannot be copied: its maintenance daemon keeps a connection to it, and its shards are on the workers). Making
    /// one costs about 5 s (three `CREATE DATABASE`s, three `CREATE EXTENSION citus`, the migrations distributing
    /// the tables), which was the distributed stage's whole time (issue 56), so a test that leaves the schema as the
    /// migrations made it hands its database to the next test of this process emptied (`TRUNCATE`, 0.3 s): see
    /// `DistributedDatabases`. A test that changed anything else (a table, column, function, policy, grant, role,
    /// setting, migration row, distribution), failed, or whose database cannot be emptied at once gets it dropped.
    private static func withDistributed<T: Sendable>(_ body: @Sendable (TestDatabase) async throws -> T) async throws -> T {
        let kept = await DistributedDatabases.shared.take()
        let name = kept?.name ?? "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
        let script = TestProject.root.appendingPathComponent("scripts/citus.sh")
        var configuration = try serverConfiguration()
        configuration.database = name
        let database = TestDatabase(name: name, configuration: configuration)
        let drop = { @Sendable () async throws in
            let dropped = try await TestProject.run(["dropdb", name], executable: script, timeout: .seconds(120))
            guard dropped.status == 0 else { throw SetupError("scripts/citus.sh dropdb \(name) failed: \(dropped.stderr)") }
        }
        var fingerprint = kept?.fingerprint
        do {
            if fingerprint == nil {
                let made = try await TestProject.run(["createdb", name], executable: script, timeout: .seconds(120))
                guard made.status == 0 else { throw SetupError("scripts/citus.sh createdb \(name) failed: \(made.stderr)") }
                let files = try MigrationFile.load(directory: TestProject.migrationsDirectory)
                let pool = database.pool(size: 1)
                do {
                    // 4 shards per distributed table, not Citus's 32: still on both workers, and the migration
                    // (sql/0031) a second faster (2.2 s instead of 3.2 s; issue 56).
                    try await pool.withConnection { conn in
                        try conn.executeScript("SET citus.shard_count = 4")
                        try Migrator(files: files).migrate(on: conn)
                    }
                } catch {
                    await pool.close()
                    throw error
                }
                await pool.close()
                fingerprint = try await DistributedDatabases.fingerprint(of: name)
            }
            let value = try await body(database)
            if let fingerprint, await DistributedDatabases.shared.keep(name, fingerprint: fingerprint) { return value }
            try await drop()
            return value
        } catch {
            try? await drop()
            throw error
        }
    }

    private static func with<T: Sendable>(
        template: String?, _ body: @Sendable (TestDatabase) async throws -> T
    ) async throws -> T {
        let server = try serverConfiguration()
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
        let admin = ConnectionPool(configuration: .init(connection: server, maxConnections: 1))
        defer { Task { await admin.close() } }
        let create = "CREATE DATABASE \(name)" + (template.map { " TEMPLATE \($0)" } ?? "")
        try await admin.withConnection { try $0.executeScript(create) }
        if template != nil {
            // A copy gets the objects of the migrated template, not its database privileges: what sql/0019 did.
            try await admin.withConnection { try $0.executeScript("REVOKE CONNECT ON DATABASE \(name) FROM PUBLIC") }
        }
        var configuration = server
        configuration.database = String(name)
        let database = TestDatabase(name: String(name), configuration: configuration)
        do {
            if let extensionName = TestEnvironment.extensionInEveryDatabase {
                // Made in the copy, not in the template: Citus keeps a connection to every database that has it, and
                // a database in use cannot be copied ("source database … is being accessed by other users").
                try await Superuser.execute("CREATE EXTENSION IF NOT EXISTS \(extensionName)", in: database.name)
            }
            let value = try await body(database)
            try await database.drop(using: admin)
            return value
        } catch {
            try? await database.drop(using: admin)
            throw error
        }
    }

    /// Drops the database. An autovacuum worker busy in it cannot be terminated by a non-superuser on
    /// PostgreSQL 17+ ("permission denied to terminate process"), nor Citus's maintenance daemon on a coordinator
    /// ("must be a superuser to terminate superuser process": it outlived 10 s of retries once under make test's
    /// load), so that case is retried for up to 30 s.
    private func drop(using admin: ConnectionPool) async throws {
        var attempt = 0
        while true {
            do {
                try await admin.withConnection { [name] in
                    try $0.executeScript("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
                    // A database migrated here (not copied from the template) made roles of its own (sql/0022).
                    try $0.executeScript("DROP ROLE IF EXISTS poopypals_app_\(name), poopypals_profiles_\(name)")
                }
                return
            } catch let error as PostgresError where error.sqlState == .insufficientPrivilege && attempt < 150 {
                attempt += 1
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// Drops the per-database service roles (sql/0022) of test databases that are gone: roles are the server's, and
    /// every migrated test database makes two. Only roles that nothing depends on any more (no privilege, ownership
    /// or policy in any database: `pg_shdepend`) and whose names test databases get.
    public static func dropOrphanedServiceRoles(on conn: Connection) throws {
        let orphans = try conn.query("""
            SELECT format('DROP ROLE IF EXISTS %I', r.rolname) FROM pg_roles r
            WHERE r.rolname ~ '^poopypals_(app|profiles)_(t|tmpl|pp_db)_'
              AND NOT EXISTS (SELECT FROM pg_shdepend d WHERE d.refclassid = 'pg_authid'::regclass AND d.refobjid = r.oid)
            """).map { try $0.decode(0, as: String.self) }
        for statement in orphans { _ = try? conn.executeScript(statement) }
    }

    /// This database reached through PgBouncer in transaction-pooling mode (`PGBOUNCER_URL`, which
    /// `make test` sets). Named prepared statements cannot survive transaction pooling in PgBouncer 1.18,
    /// so they are turned off.
    public var throughPgBouncer: TestDatabase {
        get throws {
            guard let url = ProcessInfo.processInfo.environment["PGBOUNCER_URL"], !url.isEmpty else {
                throw SetupError("PGBOUNCER_URL is not set: run the tests with `make test`, which starts PgBouncer")
            }
            var configuration = ConnectionConfiguration(connectionString: url, database: name,
                                                        applicationName: "poopypals-tests", statementCache: false)
            // 30 s, as the server's own URL (`serverConfiguration`): a login through PgBouncer to a fresh test database
            // is a server login too (PgBouncer opens one for the database's new pool before it answers), and CI's
            // load once took more than 10 s for it, failing two tests at connect (CI of stop 60).
            configuration.connectTimeoutSeconds = 30
            return TestDatabase(name: name, configuration: configuration)
        }
    }

    /// A pool on this database. Its acquire timeout, 60 s unless a test sets one, bounds a hang only: four
    /// connections logging in at once under make test's load are not a thing to time (issue 56).
    public func pool(size: Int = 4, acquireTimeout: Duration = .seconds(60)) -> ConnectionPool {
        ConnectionPool(configuration: .init(connection: configuration, maxConnections: size, acquireTimeout: acquireTimeout))
    }

    /// Borrows a connection from a one-off pool of one, for tests that need a single session.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let pool = pool(size: 1)
        do {
            let value = try await pool.withConnection(body)
            await pool.close()
            return value
        } catch {
            await pool.close()
            throw error
        }
    }
}

public struct SetupError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension TestDatabase {
    /// Sets `app.device_id` to `key` for the rest of `conn`'s transaction, for a test that reads as a device on the
    /// owner's own connection: with `set_config`, and on the distributed schema also in the form Citus carries to the
    /// workers, whose shards' policies read it (`SET LOCAL` while `citus.propagate_set_commands` is `local`).
    public static func setDevice(_ key: UUID, on conn: Connection) throws {
        try conn.query("SELECT set_config('app.device_id', \(key.uuidString), true)")
        if TestEnvironment.distributesEveryDatabase {
            try conn.executeScript("SET LOCAL citus.propagate_set_commands = 'local'")
            try conn.executeScript("SET LOCAL app.device_id = '\(key.uuidString.lowercased())'")
        }
    }

    /// Runs `body` in a transaction of another session, keeps that transaction open for `seconds` (or until
    /// `release` is set, if that comes first), then commits. Returns once `body` has run (so its locks or rows are
    /// in place), with the task to await.
    public func inAnotherSession(
        holdingFor seconds: Double, release: Locked<Bool>? = nil, _ body: @escaping @Sendable (Connection) throws -> Void
    ) async throws -> Task<Void, any Error> {
        let ready = Locked(false)
        let failed = Locked<String?>(nil)
        let pool = pool(size: 1)
        let task = Task {
            defer { Task { await pool.close() } }
            do {
                try await pool.withConnection { conn in
                    try conn.transaction { conn in
                        try body(conn)
                        ready.withLock { $0 = true }
                        let end = Date().addingTimeInterval(seconds)
                        while Date() < end && release?.value != true { Thread.sleep(forTimeInterval: 0.01) }
                    }
                }
            } catch {
                failed.withLock { $0 = "\(error)" }
                throw error
            }
        }
        // Its connection and first statement, waited for rather than raced: 10 s was outlived once under make test's
        // load (MigratorTests, 2026-11-29; issue 56). A session that failed says why at once.
        let deadline = ContinuousClock.now + .seconds(60)
        while !ready.value {
            if let failure = failed.value { throw SetupError("the other session failed: \(failure)") }
            if ContinuousClock.now > deadline {
                task.cancel()
                throw SetupError("the other session did not get going in 60 s")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        return task
    }

    /// Seeds `count` logs for the registered device with key `deviceKey` in one statement (past any quota): `occurred_at`
    /// 2020-01-01 + n minutes, change numbers 1…count (the device's counter set to `count`), with a note each when
    /// `notes`. Seeding only: the change trigger, which would renumber the device row once per log, is off for it.
    public func seedLogs(deviceKey: UUID, count: Int, notes: Bool = false) async throws {
        try await withConnection { conn in
            try conn.transaction { conn in
                try conn.query("SELECT set_config('app.device_id', \(deviceKey.uuidString), true), set_config('poopypals.max_logs_per_device', '100000000', true)")
                try conn.executeScript("ALTER TABLE poop_logs DISABLE TRIGGER poop_logs_track_change_write")
                try conn.query("""
                    INSERT INTO poop_logs (device_id, occurred_at, bristol_type, notes, change_seq)
                    SELECT get_current_device_id(), timestamptz '2020-01-01' + n * interval '1 minute', 1 + n % 7,
                           CASE WHEN \(notes) THEN 'a note of ordinary length, number ' || n END, n
                    FROM generate_series(1, \(count)) AS n
                    """)
                // The row trigger counts logs (sql/0024), and it was off.
                try conn.query("UPDATE devices SET change_seq = \(count), log_count = log_count + \(count)")
                try conn.executeScript("ALTER TABLE poop_logs ENABLE TRIGGER poop_logs_track_change_write")
            }
        }
    }

    /// What every other session on this database is doing now, a line each (`pg_stat_activity`: application name,
    /// state, wait, the statement's first 100 characters), for a failure's message: which session a test saw waiting,
    /// and whether a statement said to be cancelled still runs.
    public func sessionsNow() async -> String {
        let lines = try? await withConnection { conn in
            try conn.query("""
                SELECT coalesce(application_name, '') || ' | ' || coalesce(state, '') || ' | ' || coalesce(wait_event_type || ':' || wait_event, '')
                       || ' | ' || left(regexp_replace(coalesce(query, ''), '\\s+', ' ', 'g'), 100)
                FROM pg_stat_activity WHERE datname = \(self.name) AND pid <> pg_backend_pid() ORDER BY backend_start
                """).map { try $0.decode(0, as: String.self) }
        }
        guard let lines else { return "sessions: could not be read" }
        return "sessions on the database (application | state | wait | statement):\n" + (lines.isEmpty ? "  none" : lines.map { "  " + $0 }.joined(separator: "\n"))
    }

    /// Sessions on this database waiting for a lock now (`pg_stat_activity`), read on `conn`.
    public func sessionsWaitingOnALock(in conn: Connection) throws -> Int {
        if TestEnvironment.distributesEveryDatabase {
            // On the coordinator a statement waiting for a worker's lock waits on the worker ("Extension" here, as does
            // any statement a worker is still running): Citus's own view of every node's lock waits.
            return try conn.query("SELECT count(*) FROM citus_lock_waits")[0].decode(0, as: Int.self)
        }
        return try conn.query("SELECT count(*) FROM pg_stat_activity WHERE datname = \(name) AND wait_event_type = 'Lock'")[0]
            .decode(0, as: Int.self)
    }

    /// Returns once `count` sessions on this database wait for a lock; throws after `timeout`, or as soon as `unless`
    /// (the waiter finished without having been seen waiting).
    public func waitUntilSessionsWaitOnALock(count: Int = 1, timeout: Duration = .seconds(30),
                                             unless: @Sendable () -> Bool = { false }) async throws {
        let deadline = ContinuousClock.now + timeout
        let pool = pool(size: 1)
        defer { Task { await pool.close() } }
        var seen = 0
        while ContinuousClock.now < deadline {
            if unless() { throw SetupError("what was to wait on a lock finished before \(count) sessions were seen waiting") }
            seen = try await pool.withConnection({ try self.sessionsWaitingOnALock(in: $0) })
            if seen >= count { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw SetupError("\(seen) of \(count) sessions waited on a lock within \(timeout)")
    }
}

/// The distributed stage's databases between tests of one process (`TestDatabase.withDistributed`): one kept at a
/// time (the stage runs a test at a time), with the fingerprint of its schema right after its migrations. A database
/// is kept only when its fingerprint is unchanged, and emptied before the next test gets it; otherwise dropped. The
/// last one is left to `scripts/test.sh`, which drops every test database of the cluster after the stage.
actor DistributedDatabases {
    static let shared = DistributedDatabases()
    private var idle: [(name: String, fingerprint: String)] = []

    func take() -> (name: String, fingerprint: String)? { idle.popLast() }

    /// Empties `name` and keeps it for the next test when its schema is still `fingerprint`; false when not kept.
    func keep(_ name: String, fingerprint: String) async -> Bool {
        guard idle.isEmpty, let now = try? await Self.fingerprint(of: name), now == fingerprint else { return false }
        do {
            // Every table the migrations made but the migrations' own record; a session a test left holding a lock
            // fails this at once (the database is then dropped, which ends such sessions).
            let tables = try await Superuser.column("""
                SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE c.relkind IN ('r', 'p') AND n.nspname = 'public' AND c.relname <> 'schema_migrations'
                  AND NOT c.relispartition AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)
                """, in: name)
            guard !tables.isEmpty else { return false }
            try await Superuser.execute("SET lock_timeout = '2s'; TRUNCATE \(tables.joined(separator: ", ")) RESTART IDENTITY CASCADE",
                                        in: name)
        } catch {
            return false
        }
        idle.append((name, fingerprint))
        return true
    }

    /// What a test could change that `TRUNCATE` would not undo, as one digest: the schema's relations, columns,
    /// defaults, constraints, indexes, triggers, policies, functions, schemas, extensions, default privileges and
    /// grants; the database's and its roles' settings, attributes and memberships; the migrations' record; Citus's
    /// distribution of the tables. Read as the superuser, on the coordinator.
    static func fingerprint(of database: String) async throws -> String {
        let digest = try await Superuser.column(#"""
            WITH ns AS (
              SELECT oid FROM pg_namespace
              WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname !~ '^pg_(toast|temp_|toast_temp_)'),
            dbroles AS (
              SELECT oid FROM pg_roles
              WHERE rolname LIKE '%\_' || current_database() OR oid = (SELECT datdba FROM pg_database WHERE datname = current_database()))
            SELECT md5(string_agg(line, E'\n' ORDER BY line)) FROM (
              SELECT format('class %s %s %s %s %s %s %s', c.oid::regclass, c.relkind, c.relrowsecurity, c.relforcerowsecurity,
                            c.relacl, c.relowner::regrole, c.reloptions) FROM pg_class c WHERE c.relnamespace IN (SELECT oid FROM ns)
              UNION ALL
              SELECT format('column %s %s %s %s %s %s %s', a.attrelid::regclass, a.attname, a.atttypid::regtype, a.atttypmod,
                            a.attnotnull, a.attacl, pg_get_expr(d.adbin, d.adrelid))
              FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
              LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              WHERE c.relnamespace IN (SELECT oid FROM ns) AND a.attnum > 0 AND NOT a.attisdropped
              UNION ALL
              SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
              FROM pg_constraint WHERE connamespace IN (SELECT oid FROM ns)
              UNION ALL
              SELECT format('index %s', pg_get_indexdef(i.indexrelid)) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              WHERE c.relnamespace IN (SELECT oid FROM ns)
              UNION ALL
              SELECT format('trigger %s %s', t.tgenabled, pg_get_triggerdef(t.oid)) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
              WHERE c.relnamespace IN (SELECT oid FROM ns) AND NOT t.tgisinternal
              UNION ALL
              SELECT format('policy %s %s %s %s %s %s %s', polrelid::regclass, polname, polcmd, polpermissive, polroles::regrole[],
                            pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)) FROM pg_policy
              UNION ALL
              SELECT format('function %s %s %s %s %s %s %s', p.oid::regprocedure, md5(p.prosrc), p.proacl, p.prosecdef, p.proconfig,
                            p.provolatile, p.proowner::regrole) FROM pg_proc p WHERE p.pronamespace IN (SELECT oid FROM ns)
              UNION ALL
              SELECT format('schema %s %s %s', nspname, nspacl, nspowner::regrole) FROM pg_namespace
              UNION ALL
              SELECT format('extension %s %s', extname, extversion) FROM pg_extension
              UNION ALL
              SELECT format('default acl %s %s %s %s', defaclrole::regrole, defaclnamespace, defaclobjtype, defaclacl) FROM pg_default_acl
              UNION ALL
              SELECT format('database %s %s %s %s', datname, datallowconn, datconnlimit, datacl) FROM pg_database
              WHERE datname = current_database()
              UNION ALL
              SELECT format('setting %s %s %s', s.setdatabase <> 0, s.setrole::regrole, s.setconfig) FROM pg_db_role_setting s
              WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
                AND (s.setrole = 0 OR s.setrole IN (SELECT oid FROM dbroles))
              UNION ALL
              SELECT format('role %s %s %s %s %s %s %s', rolname, rolsuper, rolinherit, rolcreaterole, rolcanlogin, rolbypassrls, rolconfig)
              FROM pg_roles WHERE oid IN (SELECT oid FROM dbroles)
              UNION ALL
              SELECT format('member %s %s %s', m.roleid::regrole, m.member::regrole, m.admin_option) FROM pg_auth_members m
              WHERE m.roleid IN (SELECT oid FROM dbroles) OR m.member IN (SELECT oid FROM dbroles)
              UNION ALL
              SELECT format('migration %s', m) FROM public.schema_migrations m
              UNION ALL
              SELECT format('distributed %s %s %s %s', p.logicalrelid::regclass, p.partmethod, p.colocationid, p.repmodel)
              FROM pg_dist_partition p
              UNION ALL
              SELECT format('shards %s %s', logicalrelid::regclass, count(*)) FROM pg_dist_shard GROUP BY logicalrelid
            ) lines(line)
            """#, in: database)
        guard let first = digest.first else { throw SetupError("no fingerprint of \(database)") }
        return first
    }
}
