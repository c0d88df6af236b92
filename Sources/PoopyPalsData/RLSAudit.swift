import PostgresClient

/// Is device isolation really on? Checks every table with a `device_id` column, and `devices`.
public struct RLSAudit: Sendable {
    public struct Check: Sendable, Encodable, Equatable {
        public let check: String
        public let ok: Bool
        /// What is wrong, when not ok.
        public let problem: String?
    }

    public struct Report: Sendable, Encodable {
        public let checks: [Check]
        public var ok: Bool { checks.allSatisfy(\.ok) }

        enum CodingKeys: String, CodingKey { case ok, checks }
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(ok, forKey: .ok)
            try container.encode(checks, forKey: .checks)
        }
    }

    /// The policies every device table must have, by command.
    public static let requiredPolicies: [(name: String, command: String)] = [
        ("Devices can read own data", "r"), ("Devices can insert own data", "a"),
        ("Devices can update own data", "w"), ("Devices can delete own data", "d"),
    ]

    public let serviceRole: String

    public init(serviceRole: String = Database.serviceRole) {
        self.serviceRole = serviceRole
    }

    /// - Throws: `PostgresError` when the catalog cannot be read.
    public func run(on connection: Connection) throws -> Report {
        var checks: [Check] = []
        func record(_ name: String, _ problem: String?) { checks.append(Check(check: name, ok: problem == nil, problem: problem)) }

        let tables = try connection.query("""
            SELECT c.oid::regclass::text AS name, c.relrowsecurity, c.relforcerowsecurity, pg_get_userbyid(c.relowner) AS owner
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND pg_table_is_visible(c.oid)
              AND (c.relname = 'devices' OR EXISTS (
                  SELECT FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'device_id' AND NOT a.attisdropped))
            ORDER BY 1
            """)
        if !tables.contains(where: { (try? $0.decode("name", as: String.self)) == "devices" }) {
            record("table devices exists", "there is no devices table")
        }
        for table in tables {
            let name: String = try table.decode("name")
            record("\(name): row-level security enabled", try table.decode("relrowsecurity", as: Bool.self) ? nil : "row-level security is disabled")
            record("\(name): row-level security forced", try table.decode("relforcerowsecurity", as: Bool.self)
                   ? nil : "row-level security is not forced (the table owner bypasses it)")
            record("\(name): not owned by \(serviceRole)", try table.decode("owner", as: String.self) == serviceRole
                   ? "owned by the service role, which therefore bypasses unforced policies" : nil)
            let policies = try connection.query("""
                SELECT polname, polcmd::text AS command,
                       coalesce(pg_get_expr(polqual, polrelid), '') || ' ' || coalesce(pg_get_expr(polwithcheck, polrelid), '') AS expressions,
                       polpermissive
                FROM pg_policy WHERE polrelid = \(name)::regclass
                """)
            for required in Self.requiredPolicies {
                let match = policies.first { (try? $0.decode("polname", as: String.self)) == required.name }
                guard let match else {
                    record("\(name): policy \"\(required.name)\"", "missing")
                    continue
                }
                let command: String = try match.decode("command")
                let expressions: String = try match.decode("expressions")
                let problem: String? = command != required.command
                    ? "applies to the wrong command"
                    : expressions.contains("get_current_device_id()") ? nil : "does not compare with get_current_device_id()"
                record("\(name): policy \"\(required.name)\"", problem)
            }
            let required = Set(Self.requiredPolicies.map(\.name))
            var permissiveOthers: [String] = []
            for policy in policies {
                let policyName: String = try policy.decode("polname")
                if !required.contains(policyName), try policy.decode("polpermissive", as: Bool.self) { permissiveOthers.append(policyName) }
            }
            record("\(name): no other permissive policies", permissiveOthers.isEmpty ? nil : "also allows rows by: \(permissiveOthers.joined(separator: ", "))")
        }

        let function = try connection.query("SELECT to_regprocedure('get_current_device_id()') IS NOT NULL")[0].decode(0, as: Bool.self)
        if function {
            let nulls = try connection.transaction { conn in
                let unset = try conn.query("SELECT get_current_device_id() IS NULL")[0].decode(0, as: Bool.self)
                try conn.query("SELECT set_config('app.device_id', '', true)")
                let empty = try conn.query("SELECT get_current_device_id() IS NULL")[0].decode(0, as: Bool.self)
                return unset && empty
            }
            record("get_current_device_id() is NULL without a device", nulls ? nil : "returns a value without a device")
        } else {
            record("get_current_device_id() is NULL without a device", "the function does not exist")
        }

        let role = try connection.query("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = \(serviceRole)")
        if let role = role.first {
            record("\(serviceRole) is not superuser", try role.decode("rolsuper", as: Bool.self) ? "it is a superuser" : nil)
            record("\(serviceRole) has no BYPASSRLS", try role.decode("rolbypassrls", as: Bool.self) ? "it has BYPASSRLS" : nil)
            // What every request does first. PostgreSQL 16+ separates membership from the SET privilege (a
            // CREATEROLE creator gets ADMIN without SET), so MEMBER is the wrong question: ask SET there.
            let canSwitch = try connection.query("""
                SELECT CASE WHEN current_setting('server_version_num')::int >= 160000
                            THEN pg_has_role(current_user, \(serviceRole), 'SET')
                            ELSE pg_has_role(current_user, \(serviceRole), 'MEMBER') END
                """)[0].decode(0, as: Bool.self)
            record("the login role can switch to \(serviceRole)", canSwitch ? nil
                   : "current_user may not SET ROLE \(serviceRole): every device request would fail with 42501 (on PostgreSQL 16+: GRANT \(serviceRole) TO <login> WITH SET TRUE)")
        } else {
            record("\(serviceRole) exists", "the role does not exist")
        }
        return Report(checks: checks)
    }
}
