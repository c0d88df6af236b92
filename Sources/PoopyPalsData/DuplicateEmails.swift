import Foundation
import PostgresClient

/// Emails used by more than one user, exactly or after normalisation (trim + lower-case).
///
/// The one place this SQL lives: `poopypals monitor duplicate-emails`, the migrator's pre-flight before
/// `users_email_unique`, the tests and the docs (`--show-sql`) all use it.
public enum DuplicateEmails {
    /// Works on a legacy `users(id, email, …)` table too: `created_at` is read through `to_jsonb` so the
    /// query does not fail where that column does not exist yet.
    public static let sql = """
        SELECT lower(regexp_replace(u.email, '^[[:space:]]+|[[:space:]]+$', '', 'g')) AS email,
               count(*)::int AS users,
               (count(*) > count(DISTINCT u.email)) AS exact,
               (count(DISTINCT u.email) > 1) AS normalized,
               max((to_jsonb(u) ->> 'created_at')::timestamptz) AS newest,
               string_agg(u.id::text, ',' ORDER BY (to_jsonb(u) ->> 'created_at')::timestamptz DESC NULLS LAST, u.id) AS user_ids
        FROM users u
        GROUP BY lower(regexp_replace(u.email, '^[[:space:]]+|[[:space:]]+$', '', 'g'))
        HAVING count(*) > 1
        ORDER BY max((to_jsonb(u) ->> 'created_at')::timestamptz) DESC NULLS LAST, 1
        """

    public struct Group: Sendable, Encodable, Equatable {
        /// The normalised email. Redact it before printing it anywhere that is logged.
        public let email: String
        public let users: Int
        /// Some rows have the identical email.
        public let exact: Bool
        /// Some rows differ only in letter case or surrounding spaces.
        public let normalized: Bool
        public let newestCreatedAt: Date?
        /// Newest first.
        public let userIDs: [UUID]

        public var kind: String {
            switch (exact, normalized) {
            case (true, true): return "exact+case/space"
            case (true, false): return "exact"
            default: return "case/space"
            }
        }

        /// For output that may end up in logs: `c***@example.com`.
        public var redactedEmail: String { (try? Email(email).redacted) ?? "***" }
    }

    /// Runs `sql`. Where `users` is under row-level security (sql/0008), it reads as `poopypals_profiles`, the
    /// one role whose policy shows every user, inside a read-only transaction of its own.
    /// - Throws: `PostgresError` (for example 42P01 when there is no `users` table).
    public static func find(on connection: Connection) throws -> [Group] {
        let readAsProfiles = try connection.query("""
            SELECT EXISTS (SELECT FROM pg_class WHERE oid = to_regclass('users') AND relrowsecurity)
                   AND EXISTS (SELECT FROM pg_roles WHERE rolname = 'poopypals_profiles')
            """)[0].decode(0, as: Bool.self)
        guard readAsProfiles else { return try groups(connection) }
        if connection.transactionState == .inTransaction {
            return try connection.savepoint { conn in
                try conn.query("SELECT set_config('role', 'poopypals_profiles', true)")
                defer { _ = try? conn.query("SELECT set_config('role', 'none', true)") }
                return try groups(conn)
            }
        }
        return try connection.transaction { conn in
            try conn.executeScript("SET TRANSACTION READ ONLY")
            try conn.query("SELECT set_config('role', 'poopypals_profiles', true)")
            return try groups(conn)
        }
    }

    private static func groups(_ connection: Connection) throws -> [Group] {
        try connection.query(PostgresQuery(unsafeSQL: sql)).map { row in
            Group(email: try row.decode("email"), users: try row.decode("users"), exact: try row.decode("exact"),
                  normalized: try row.decode("normalized"), newestCreatedAt: try row.decode("newest"),
                  userIDs: try row.decode("user_ids", as: String.self).split(separator: ",").compactMap { UUID(uuidString: String($0)) })
        }
    }

    /// Groups, or none when there is no `users` table yet (a fresh database).
    static func findIfUsersExist(on connection: Connection) throws -> [Group] {
        let exists = try connection.query("SELECT to_regclass('users') IS NOT NULL")[0].decode(0, as: Bool.self)
        return exists ? try find(on: connection) : []
    }
}
