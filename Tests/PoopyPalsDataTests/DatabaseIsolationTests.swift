import Foundation
import PostgresClient
import Testing
import TestSupport

/// Issue 42, item 1: two PoopyPals databases on one server, each migrated by its own owner. The service roles are
/// the server's and every migrating login is a member of them, so the owner of one database could connect to the
/// other, SET ROLE to a service role and read, change or erase its rows (reproduced: every profile's email). Since
/// sql/0019 nobody but the database's own login may connect.
@Suite("Isolation between databases")
struct DatabaseIsolationTests {
    @Test(.enabled(if: PgDump.superuserURL != nil, "needs POOPYPALS_TEST_SUPERUSER_URL to make a second owner (make test sets it)"))
    func anotherDatabasesOwnerCannotReachThisOne() async throws {
        let superuserURL = try #require(PgDump.superuserURL)
        // "postgresql:///postgres?host=…&port=…&user=postgres": the private socket, where every login is trusted.
        @Sendable func url(database: String, user: String) -> String {
            superuserURL.replacingOccurrences(of: "/postgres?", with: "/\(database)?")
                .replacingOccurrences(of: "user=postgres", with: "user=\(user)")
        }
        // What a run killed before its clean-up left (its owner would be named by the audit below too).
        for role in try await Superuser.column("SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'pp\\_owner\\_%'") {
            try await Superuser.execute("DROP DATABASE IF EXISTS pp_db_\(role.dropFirst("pp_owner_".count)) WITH (FORCE)", "DROP ROLE IF EXISTS \(role)")
        }
        let suffix = UUID().uuidString.lowercased().prefix(8)
        let owner = "pp_owner_\(suffix)", database = "pp_db_\(suffix)"
        // A is migrated here by `migrate`, not copied from the migrated template: what the migrations do to the
        // database itself (its CONNECT privilege) is under test, and a copy does not carry it.
        try await TestDatabase.with { a in
            let migratedA = try await TestProject.run(["migrate", "--database-url", a.url, "--migrations-dir", TestProject.migrationsDirectory.path])
            #expect(migratedA.status == 0, "stderr: \(migratedA.stderr.suffix(1500))")
            // A's data, written past its policies.
            try await Superuser.execute("INSERT INTO users (id, email, full_name) VALUES (gen_random_uuid(), 'a-\(suffix)@example.com', 'In A')", in: a.name)
            // A second deployment's owner, as the README's (CREATEROLE, not a superuser), holding the server's service
            // roles as every migrating login does (PostgreSQL 16+ lets only a holder of ADMIN grant them: the
            // operator did).
            try await Superuser.execute("CREATE ROLE \(owner) LOGIN CREATEDB CREATEROLE", "CREATE DATABASE \(database) OWNER \(owner)",
                                  "GRANT poopypals_app, poopypals_profiles TO \(owner) WITH ADMIN OPTION")
            do {
                // B's owner migrates B: it becomes a member of the server's service roles.
                let migrated = try await TestProject.run(["migrate", "--database-url", url(database: database, user: owner),
                                                          "--migrations-dir", TestProject.migrationsDirectory.path])
                #expect(migrated.status == 0, "stdout: \(migrated.stdout) stderr: \(migrated.stderr.suffix(1500))")
                // B's owner, at A: no session at all.
                let intruder = ConnectionPool(configuration: .init(
                    connection: ConnectionConfiguration(connectionString: url(database: a.name, user: owner)), maxConnections: 1))
                do {
                    let rows = try await intruder.withConnection { conn in
                        try conn.executeScript("SET ROLE poopypals_profiles")
                        return try conn.query("SELECT count(*) FROM users")[0].decode(0, as: Int64.self)
                    }
                    Issue.record("the owner of another database connected to A and read \(rows) profile(s) as poopypals_profiles")
                } catch {
                    #expect("\(error)".contains("permission denied for database"), "\(error)")
                }
                await intruder.close()
                // A's audit says so; with CONNECT back for PUBLIC it names both causes.
                let audit = try await TestProject.run(["monitor", "rls", "--database-url", a.url])
                #expect(audit.status == 0, "\(audit.stdout)")
                try await Superuser.execute("GRANT CONNECT ON DATABASE \(a.name) TO PUBLIC")
                let open = try await TestProject.run(["monitor", "rls", "--database-url", a.url])
                #expect(open.status == 1)
                #expect(open.stdout.contains("FAIL PUBLIC may not connect to this database"), "\(open.stdout)")
                let named = open.stdout.split(separator: "\n").first { $0.hasPrefix("FAIL no other login may connect here as a member of the service roles: ") }
                #expect(named?.contains(owner) == true, "\(open.stdout)")
            } catch {
                try? await Superuser.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)", "DROP ROLE IF EXISTS \(owner)")
                throw error
            }
            try await Superuser.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)", "DROP ROLE IF EXISTS \(owner)")
        }
    }
}
