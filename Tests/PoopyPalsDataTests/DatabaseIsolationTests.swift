import Foundation
import PostgresClient
import Testing
import TestSupport

/// Issue 42, item 1: two PoopyPals databases on one server, each migrated by its own owner. The service roles were
/// the server's and every migrating login a member of them, so the owner of one database could connect to the
/// other, SET ROLE to a service role and read, change or erase its rows (reproduced: every profile's email).
/// sql/0019 takes CONNECT from PUBLIC; sql/0022 gives each database service roles of its own, so that even where
/// both may connect, no role either owner can switch to reaches the other's rows.
@Suite("Isolation between databases")
struct DatabaseIsolationTests {
    /// What one login may do in a database that is not its own: every statement that would read, change or erase a
    /// row there, as itself and after switching to each role it might try. Answers the ones that reached a row.
    static func breaches(of target: String, by login: String, url: @Sendable (String, String) throws -> String) async throws -> [String] {
        let intruder = ConnectionPool(configuration: .init(
            connection: ConnectionConfiguration(connectionString: try url(target, login)), maxConnections: 1))
        defer { Task { await intruder.close() } }
        let roles = try await Superuser.column("""
            SELECT unnest(ARRAY[poopypals_service_role(), poopypals_profiles_role(), 'poopypals_app', 'poopypals_profiles', 'none'])
            """, in: target)
        let statements = ["SELECT count(*) FROM users", "SELECT count(*) FROM devices", "SELECT count(*) FROM poop_logs",
                          "UPDATE users SET full_name = 'taken'", "DELETE FROM poop_logs", "DELETE FROM devices"]
        var reached: [String] = []
        for role in roles {
            for statement in statements {
                let touched: Int64? = try await intruder.withConnection { conn in
                    do {
                        return try conn.transaction { conn -> Int64 in
                            try conn.query("SELECT set_config('role', \(role), true)")
                            // Through the device context too: a device key that exists there.
                            try conn.query("SELECT set_config('app.device_id', 'f5f0b82f-651c-d77b-6b9f-8bf348e6c2c6', true)")
                            let result = try conn.query(PostgresQuery(unsafeSQL: statement))
                            return statement.hasPrefix("SELECT") ? try result[0].decode(0, as: Int64.self) : Int64(result.rowsAffected)
                        }
                    } catch is PostgresError {
                        return nil  // refused: permission denied for the role or the table
                    }
                }
                if let touched, touched > 0 { reached.append("\(role): \(statement) → \(touched)") }
            }
        }
        return reached
    }

    @Test(.enabled(if: PgDump.superuserURL != nil, "needs POOPYPALS_TEST_SUPERUSER_URL to make a second owner (make test sets it)"))
    func neitherOwnerCanReachTheOthersRowsByAnyRoleSwitch() async throws {
        // "postgresql:///postgres?host=…&port=…&user=postgres": the private socket, where every login is trusted.
        @Sendable func url(_ database: String, _ user: String) throws -> String {
            try Superuser.url(database: database).replacingOccurrences(of: "user=postgres", with: "user=\(user)")
        }
        // What a run killed before its clean-up left (its owner would be named by the audit below too).
        for role in try await Superuser.column("SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'pp\\_owner\\_%'") {
            let tag = role.dropFirst("pp_owner_".count)
            try await Superuser.execute("DROP DATABASE IF EXISTS pp_db_\(tag) WITH (FORCE)", "DROP ROLE IF EXISTS \(role)",
                                        "DROP ROLE IF EXISTS poopypals_app_pp_db_\(tag), poopypals_profiles_pp_db_\(tag)")
        }
        let suffix = UUID().uuidString.lowercased().prefix(8)
        let owner = "pp_owner_\(suffix)", database = "pp_db_\(suffix)"
        let cleanUp = [String](["DROP DATABASE IF EXISTS \(database) WITH (FORCE)", "DROP ROLE IF EXISTS \(owner)",
                                "DROP ROLE IF EXISTS poopypals_app_\(database), poopypals_profiles_\(database)"])
        // A is migrated here by `migrate`, not copied from the migrated template: what the migrations do to the
        // database itself (its CONNECT privilege, its roles) is under test, and a copy does not carry it.
        try await TestDatabase.with { a in
            let migratedA = try await TestProject.run(["migrate", "--database-url", a.url, "--migrations-dir", TestProject.migrationsDirectory.path])
            #expect(migratedA.status == 0, "stderr: \(migratedA.stderr.suffix(1500))")
            let loginA = try await Superuser.column("SELECT pg_get_userbyid(datdba)::text FROM pg_database WHERE datname = '\(a.name)'")[0]
            // A second deployment's owner, as the README's (CREATEROLE, not a superuser). The early migrations still
            // grant it the server's shared roles, which PostgreSQL 16+ lets only a holder of ADMIN do: the operator did.
            try await Superuser.execute("CREATE ROLE \(owner) LOGIN CREATEDB CREATEROLE", "CREATE DATABASE \(database) OWNER \(owner)",
                                        "GRANT poopypals_app, poopypals_profiles TO \(owner) WITH ADMIN OPTION")
            do {
                let migrated = try await TestProject.run(["migrate", "--database-url", try url(database, owner),
                                                          "--migrations-dir", TestProject.migrationsDirectory.path])
                #expect(migrated.status == 0, "stdout: \(migrated.stdout) stderr: \(migrated.stderr.suffix(1500))")
                // Each has rows: a profile, and a device with a log and its key in the map (written past the policies).
                for name in [a.name, database] {
                    try await Superuser.execute("""
                        WITH u AS (INSERT INTO users (id, email, full_name) VALUES (gen_random_uuid(), 'x-\(suffix)@example.com', 'Private') RETURNING id),
                             d AS (INSERT INTO devices (key, user_id) SELECT 'f5f0b82f-651c-d77b-6b9f-8bf348e6c2c6', id FROM u RETURNING id, key, user_id),
                             m AS (INSERT INTO device_key_map (key, id, user_id) SELECT key, id, user_id FROM d)
                        INSERT INTO poop_logs (device_id, occurred_at, bristol_type) SELECT id, now(), 4 FROM d
                        """, in: name)
                }
                // Each database's roles are its own.
                let rolesA = try await Superuser.column("SELECT poopypals_service_role() || ' ' || poopypals_profiles_role()", in: a.name)
                let rolesB = try await Superuser.column("SELECT poopypals_service_role() || ' ' || poopypals_profiles_role()", in: database)
                #expect(rolesA != rolesB && rolesB == ["poopypals_app_\(database) poopypals_profiles_\(database)"])

                // The other's owner cannot even open a session.
                await #expect(throws: (any Error).self) { _ = try await Self.breaches(of: a.name, by: owner, url: url) }
                // Where it can (CONNECT given back to PUBLIC, as before sql/0019), no role it may switch to reaches a row.
                try await Superuser.execute("GRANT CONNECT ON DATABASE \(a.name) TO PUBLIC", "GRANT CONNECT ON DATABASE \(database) TO PUBLIC")
                #expect(try await Self.breaches(of: a.name, by: owner, url: url) == [])
                #expect(try await Self.breaches(of: database, by: loginA, url: url) == [])
                // Nor can it make itself a member of the other's roles (PostgreSQL 16+: only a holder of ADMIN may
                // grant a role; on 15 CREATEROLE may grant any, which README "Deployment" tells the operator).
                let major = try await Superuser.column("SELECT current_setting('server_version_num')::int / 10000")[0]
                if let major = Int(major), major >= 16 {
                    let grant = ConnectionPool(configuration: .init(connection: ConnectionConfiguration(connectionString: try url(a.name, owner)), maxConnections: 1))
                    await #expect(throws: PostgresError.self) {
                        try await grant.withConnection { conn in
                            _ = try conn.executeScript("GRANT \(rolesA[0].split(separator: " ")[1]) TO \(owner)")
                        }
                    }
                    await grant.close()
                }

                // A's audit: PUBLIC may connect (FAIL); no other login is a member of A's roles, until one is made so.
                let open = try await TestProject.run(["monitor", "rls", "--database-url", a.url])
                #expect(open.status == 1)
                #expect(open.stdout.contains("FAIL PUBLIC may not connect to this database"), "\(open.stdout)")
                #expect(open.stdout.contains("ok   no other login is a member of this database's service roles"), "\(open.stdout)")
                try await Superuser.execute("REVOKE CONNECT ON DATABASE \(a.name) FROM PUBLIC", "GRANT \(rolesA[0].split(separator: " ")[1]) TO \(owner)")
                let member = try await TestProject.run(["monitor", "rls", "--database-url", a.url])
                #expect(member.status == 1)
                let named = member.stdout.split(separator: "\n").first { $0.hasPrefix("FAIL no other login is a member of this database's service roles: ") }
                #expect(named?.contains(owner) == true, "\(member.stdout)")
            } catch {
                for statement in cleanUp { try? await Superuser.execute(statement) }
                throw error
            }
            for statement in cleanUp { try await Superuser.execute(statement) }
        }
    }
}
