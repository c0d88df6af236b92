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

    /// One policy as it must be: command, roles (empty = PUBLIC), and its expressions after normalisation.
    public struct ExpectedPolicy: Sendable {
        public let name: String
        /// `r` select, `a` insert, `w` update, `d` delete (`pg_policy.polcmd`).
        public let command: String
        public let roles: [String]
        public let using: String?
        public let check: String?
    }

    /// The device of a row, compared with the transaction's device (its stable id, found by its key: sql/0021). A
    /// plain call, no sub-select: Citus refuses a sub-select in a policy it propagates to the shards (sql/0028).
    public static let currentDevice = "get_current_device_id()"
    /// A device row, found by the transaction's key, while it is not being erased.
    public static let ownDeviceRow = "((key = get_current_device_key()) AND (erasing_since IS NULL))"

    /// The four policies of a table whose rows belong to a device, for every role: `own` is `device_id` compared with
    /// the current device (`devices` itself: `ownDeviceRow`).
    public static func devicePolicies(own: String = "(device_id = \(currentDevice))") -> [ExpectedPolicy] {
        return [
            ExpectedPolicy(name: "Devices can read own data", command: "r", roles: [], using: own, check: nil),
            ExpectedPolicy(name: "Devices can insert own data", command: "a", roles: [], using: nil, check: own),
            ExpectedPolicy(name: "Devices can update own data", command: "w", roles: [], using: own, check: own),
            ExpectedPolicy(name: "Devices can delete own data", command: "d", roles: [], using: own, check: nil),
        ]
    }

    /// `devices` beyond its four device policies (sql/0010): the profile role's functions read, move (rotation)
    /// and erase devices, and register them (sql/0027).
    public static func deviceProfilePolicies(_ roles: ServiceRoles) -> [ExpectedPolicy] {
        let profiles = "(CURRENT_USER = '\(roles.profiles)'::name)"
        return [
            ExpectedPolicy(name: "Profiles can read devices", command: "r", roles: [roles.profiles], using: profiles, check: nil),
            ExpectedPolicy(name: "Profiles can move devices", command: "w", roles: [roles.profiles], using: profiles, check: profiles),
            ExpectedPolicy(name: "Profiles can erase devices", command: "d", roles: [roles.profiles], using: profiles, check: nil),
            ExpectedPolicy(name: "Profiles can register devices", command: "a", roles: [roles.profiles], using: nil, check: profiles),
        ]
    }

    /// `poop_logs` beyond its four device policies (sql/0021): the profile role deletes the logs of a device being
    /// erased (its erasure batch checks the device: sql/0028, a shard's policy cannot look it up).
    public static func logProfilePolicies(_ roles: ServiceRoles) -> [ExpectedPolicy] {
        let erasing = "(CURRENT_USER = '\(roles.profiles)'::name)"
        return [
            ExpectedPolicy(name: "Profiles can read logs of erased devices", command: "r", roles: [roles.profiles], using: erasing, check: nil),
            ExpectedPolicy(name: "Profiles can erase logs of erased devices", command: "d", roles: [roles.profiles], using: erasing, check: nil),
        ]
    }

    /// `users` (sql/0008, 0010): a device reads and updates the user it is linked to; the profile function's
    /// role reads, creates, updates and erases profiles.
    public static func userPolicies(_ roles: ServiceRoles) -> [ExpectedPolicy] {
        let linked = "(id = get_current_device_user_id())"
        let profiles = "(CURRENT_USER = '\(roles.profiles)'::name)"
        return [
            ExpectedPolicy(name: "Devices can read own user", command: "r", roles: [roles.app], using: linked, check: nil),
            ExpectedPolicy(name: "Devices can update own user", command: "w", roles: [roles.app], using: linked, check: linked),
            ExpectedPolicy(name: "Profiles can read users", command: "r", roles: [roles.profiles], using: profiles, check: nil),
            ExpectedPolicy(name: "Profiles can create users", command: "a", roles: [roles.profiles], using: nil, check: profiles),
            ExpectedPolicy(name: "Profiles can update users", command: "w", roles: [roles.profiles], using: profiles, check: profiles),
            ExpectedPolicy(name: "Profiles can erase users", command: "d", roles: [roles.profiles], using: profiles, check: nil),
        ]
    }

    /// Whitespace collapsed, none just inside parentheses: how two printings of one expression are compared.
    static func normalized(_ expression: String?) -> String? {
        guard let expression, !expression.isEmpty else { return nil }
        var text = expression.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        text = text.replacingOccurrences(of: "( ", with: "(").replacingOccurrences(of: " )", with: ")")
        return text
    }

    /// The service role to check in place of this database's own (`ServiceRoles`); nil: the database's.
    public let serviceRoleOverride: String?

    public init(serviceRole: String? = nil) {
        serviceRoleOverride = serviceRole
    }

    /// `device_key_map` (sql/0026: what `get_current_device_id()` reads): a device reads only the row of its own
    /// key and writes none; the profile role (its registration, rotation and erasure functions: sql/0027) keeps
    /// any row. Plain calls, no sub-select.
    public static func keyMapPolicies(_ roles: ServiceRoles) -> [ExpectedPolicy] {
        let profiles = "(CURRENT_USER = '\(roles.profiles)'::name)"
        return [
            ExpectedPolicy(name: "Devices can read own key", command: "r", roles: [], using: "(key = get_current_device_key())", check: nil),
            ExpectedPolicy(name: "Profiles keep the key map", command: "*", roles: [roles.profiles], using: profiles, check: profiles),
        ]
    }

    /// Whether Citus distributes this database's `devices` (sql/0031). Citus's catalog is asked only where it exists.
    static func isDistributed(on connection: Connection) throws -> Bool {
        guard try connection.query("SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL")[0].decode(0, as: Bool.self) else {
            return false
        }
        return try connection.query("""
            SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = to_regclass('devices') AND partmethod = 'h')
            """)[0].decode(0, as: Bool.self)
    }

    /// - Throws: `PostgresError` when the catalog cannot be read.
    public func run(on connection: Connection) throws -> Report {
        var checks: [Check] = []
        func record(_ name: String, _ problem: String?) { checks.append(Check(check: name, ok: problem == nil, problem: problem)) }
        let roles = try ServiceRoles.read(on: connection)
        let serviceRole = serviceRoleOverride ?? roles.app

        // Policies bind nobody who logs in as a superuser or with BYPASSRLS, FORCEd or not.
        let login = try connection.query("SELECT current_user::text AS name, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")[0]
        let loginName: String = try login.decode("name")
        record("the login role \(loginName) is not a superuser", try login.decode("rolsuper", as: Bool.self)
               ? "it is a superuser: row-level security is bypassed on every table; log in as a non-superuser owner" : nil)
        record("the login role \(loginName) has no BYPASSRLS", try login.decode("rolbypassrls", as: Bool.self)
               ? "it has BYPASSRLS: row-level security is bypassed on every table" : nil)

        let tables = try connection.query("""
            SELECT c.oid::regclass::text AS name, c.relrowsecurity, c.relforcerowsecurity, pg_get_userbyid(c.relowner) AS owner,
                   c.relname = 'devices' AS keyed_by_id, c.relname = 'users' AS is_users, c.relname = 'poop_logs' AS is_logs,
                   c.relname = 'device_key_map' AS is_key_map
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND pg_table_is_visible(c.oid)
              AND (c.relname IN ('devices', 'users', 'device_key_map') OR EXISTS (
                  SELECT FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'device_id' AND NOT a.attisdropped))
            ORDER BY 1
            """)
        for required in ["devices", "users"] where !tables.contains(where: { (try? $0.decode("name", as: String.self)) == required }) {
            record("table \(required) exists", "there is no \(required) table")
        }
        for table in tables {
            let name: String = try table.decode("name")
            record("\(name): row-level security enabled", try table.decode("relrowsecurity", as: Bool.self) ? nil : "row-level security is disabled")
            record("\(name): row-level security forced", try table.decode("relforcerowsecurity", as: Bool.self)
                   ? nil : "row-level security is not forced (the table owner bypasses it)")
            record("\(name): not owned by \(serviceRole)", try table.decode("owner", as: String.self) == serviceRole
                   ? "owned by the service role, which therefore bypasses unforced policies" : nil)
            let expected = try table.decode("is_users", as: Bool.self) ? Self.userPolicies(roles)
                : try table.decode("is_key_map", as: Bool.self) ? Self.keyMapPolicies(roles)
                : try table.decode("keyed_by_id", as: Bool.self) ? Self.devicePolicies(own: Self.ownDeviceRow) + Self.deviceProfilePolicies(roles)
                : try table.decode("is_logs", as: Bool.self) ? Self.devicePolicies() + Self.logProfilePolicies(roles)
                : Self.devicePolicies()
            let policies = try connection.query("""
                SELECT polname, polcmd::text AS command, polpermissive,
                       pg_get_expr(polqual, polrelid) AS using_expression, pg_get_expr(polwithcheck, polrelid) AS check_expression,
                       coalesce((SELECT string_agg(rolname::text, ',' ORDER BY rolname) FROM pg_roles WHERE oid = ANY(polroles)), '') AS roles
                FROM pg_policy WHERE polrelid = \(name)::regclass
                """)
            for policy in expected {
                let name = "\(name): policy \"\(policy.name)\""
                guard let match = policies.first(where: { (try? $0.decode("polname", as: String.self)) == policy.name }) else {
                    record(name, "missing")
                    continue
                }
                let roles = try match.decode("roles", as: String.self).split(separator: ",").map(String.init)
                let using = Self.normalized(try match.decode("using_expression"))
                let check = Self.normalized(try match.decode("check_expression"))
                let problem: String? = if try match.decode("command", as: String.self) != policy.command {
                    "applies to the wrong command"
                } else if !(try match.decode("polpermissive", as: Bool.self)) {
                    "is restrictive, expected permissive"
                } else if roles != policy.roles.sorted() {
                    "applies to \(roles.isEmpty ? "PUBLIC" : roles.joined(separator: ", ")), expected \(policy.roles.isEmpty ? "PUBLIC" : policy.roles.joined(separator: ", "))"
                } else if using != Self.normalized(policy.using) {
                    "USING is \(using ?? "absent"), expected \(Self.normalized(policy.using) ?? "absent")"
                } else if check != Self.normalized(policy.check) {
                    "WITH CHECK is \(check ?? "absent"), expected \(Self.normalized(policy.check) ?? "absent")"
                } else {
                    nil
                }
                record(name, problem)
            }
            let known = Set(expected.map(\.name))
            var permissiveOthers: [String] = []
            for policy in policies {
                let policyName: String = try policy.decode("polname")
                if !known.contains(policyName), try policy.decode("polpermissive", as: Bool.self) { permissiveOthers.append(policyName) }
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

        // A SECURITY DEFINER function runs with its owner's rights for whoever may call it: the owner must be a
        // role nobody logs in as, without superuser or BYPASSRLS; search_path must be fixed (or a caller's
        // objects would be found first); and PUBLIC must not be able to call it.
        // On a database Citus distributes (sql/0031) this database's service roles log in: Citus opens its connections
        // to the workers as the role a transaction switched to. There that login is the design (kept to the nodes'
        // private socket folder by the cluster's pg_hba.conf, which this login cannot read), not a finding.
        let serviceRolesLogIn = try Self.isDistributed(on: connection)
        let ownRoles = roles != .shared
        let definers = try connection.query("""
            SELECT p.oid::regprocedure::text AS name, r.rolcanlogin, r.rolsuper, r.rolbypassrls, r.rolname::text AS owner,
                   coalesce(EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%'), false) AS fixed_path,
                   p.proacl IS NULL OR EXISTS (SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') AS public_execute
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_roles r ON r.oid = p.proowner
            WHERE p.prosecdef AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND pg_function_is_visible(p.oid)
            ORDER BY 1
            """)
        for function in definers {
            let name: String = try function.decode("name")
            let owner: String = try function.decode("owner")
            let loginExpected = serviceRolesLogIn && ownRoles && (owner == roles.app || owner == roles.profiles)
            let problem: String? = if try function.decode("rolcanlogin", as: Bool.self) && !loginExpected {
                "owned by a role that can log in"
            } else if try function.decode("rolsuper", as: Bool.self) || function.decode("rolbypassrls", as: Bool.self) {
                "owned by a superuser or a BYPASSRLS role"
            } else if !(try function.decode("fixed_path", as: Bool.self)) {
                "search_path is not fixed (SET search_path)"
            } else if try function.decode("public_execute", as: Bool.self) {
                "PUBLIC may execute it"
            } else {
                nil
            }
            record("SECURITY DEFINER \(name): NOLOGIN owner, fixed search_path, not executable by PUBLIC", problem)
        }

        // Roles are the server's, not the database's: a login that may connect here and is a member of this
        // database's service roles can SET ROLE and read its rows. sql/0019 takes CONNECT from PUBLIC, and sql/0022
        // gives each database roles of its own that only its migrating login is granted; these say whether both hold.
        let publicConnect = try connection.query("""
            SELECT d.datacl IS NULL OR EXISTS (SELECT FROM aclexplode(d.datacl) a WHERE a.grantee = 0 AND a.privilege_type = 'CONNECT')
            FROM pg_database d WHERE d.datname = current_database()
            """)[0].decode(0, as: Bool.self)
        record("PUBLIC may not connect to this database", publicConnect
               ? "every login of the server may connect, including members of the service roles made by other databases' migrations; as the owner: REVOKE CONNECT ON DATABASE <name> FROM PUBLIC (sql/0019)" : nil)
        // With this database's own roles (sql/0022) any other member is a grant someone made by hand; with the shared
        // ones (before it) the members are every PoopyPals database's owner, and only those that may connect count.
        let outsiders = try connection.query("""
            SELECT string_agg(r.rolname::text, ', ' ORDER BY r.rolname)
            FROM pg_roles r, pg_database d
            WHERE d.datname = current_database() AND r.rolcanlogin AND NOT r.rolsuper
              AND r.rolname <> current_user AND r.oid <> d.datdba
              AND (\(ownRoles) OR has_database_privilege(r.oid, d.oid, 'CONNECT'))
              AND ((to_regrole(\(roles.app)) IS NOT NULL AND r.rolname <> \(roles.app) AND pg_has_role(r.oid, to_regrole(\(roles.app)), 'MEMBER'))
                   OR (to_regrole(\(roles.profiles)) IS NOT NULL AND r.rolname <> \(roles.profiles)
                       AND pg_has_role(r.oid, to_regrole(\(roles.profiles)), 'MEMBER')))
            """)[0].decode(0, as: String?.self)
        record("no other login is a member of this database's service roles", outsiders.map {
            ownRoles ? "\($0) may switch to this database's service roles (\(roles.app), \(roles.profiles)): REVOKE them"
                : "\($0) may connect to this database and switch to the service roles (granted for another database)"
        })

        // Nobody logs in as a service role, but on a database Citus distributes (above). Said for itself: a role is
        // not counted a member of itself among the outsiders above, where a service role's login was once caught.
        let loggingIn = try connection.query("""
            SELECT string_agg(rolname::text, ', ' ORDER BY rolname) FROM pg_roles
            WHERE rolcanlogin AND rolname IN (\(roles.app), \(roles.profiles))
            """)[0].decode(0, as: String?.self)
        record("this database's service roles cannot log in", loggingIn.flatMap { serviceRolesLogIn ? nil
            : "\($0) can log in: ALTER ROLE … NOLOGIN (only a database Citus distributes needs the login, sql/0031)" })

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
