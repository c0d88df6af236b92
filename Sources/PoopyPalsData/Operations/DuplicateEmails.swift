import Foundation
import PostgresClient

/// Emails used by more than one user, exactly or under `Email`'s canonical form (case, surrounding spaces,
/// Unicode normalisation and case folding, IDNA domains, invisible characters).
///
/// The one place this check lives: `poopypals monitor duplicate-emails`, the migrator's pre-flight before
/// `users_email_unique` and `users_email_canonical`, and the tests. SQL reads the rows (`--show-sql` prints it);
/// the grouping is `Email.comparisonKey(forStored:)`, so that it is the same key the service stores, and works on
/// a database that predates the canonical form.
public enum DuplicateEmails {
    /// Works on a legacy `users(id, email, …)` table too: `created_at` is read through `to_jsonb` so the
    /// query does not fail where that column does not exist yet.
    public static let sql = """
        SELECT u.id, u.email, (to_jsonb(u) ->> 'created_at')::timestamptz AS created_at FROM users u WHERE u.email IS NOT NULL
        """

    /// The key a stored email is grouped by: its canonical form, or for a value that is no address at all,
    /// trimmed and lower-cased (as the first version of this check grouped everything).
    public static func key(_ stored: String) -> String {
        Email.comparisonKey(forStored: stored) ?? stored.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }

    /// One stored row, as `sql` reads it.
    struct StoredUser {
        let id: UUID
        let email: String
        let createdAt: Date?
    }

    static func storedUsers(_ connection: Connection) throws -> [StoredUser] {
        try connection.query(PostgresQuery(unsafeSQL: sql)).map { row in
            StoredUser(id: try row.decode("id"), email: try row.decode("email"), createdAt: try row.decode("created_at"))
        }
    }

    /// Rows sharing a key, each group oldest first (created_at, rows without one last, then id): the first is the
    /// one a merge keeps. Groups in key order.
    static func duplicateGroups(_ users: [StoredUser]) -> [(key: String, users: [StoredUser])] {
        Dictionary(grouping: users, by: { key($0.email) })
            .filter { $0.value.count > 1 }
            .map { key, users in
                (key, users.sorted { inOrder($0, $1, newestFirst: false) })
            }
            .sorted { $0.key < $1.key }
    }

    /// By `created_at` (rows without one last), then by id: the order a merge keeps (oldest first) or the
    /// monitor lists (newest first).
    static func inOrder(_ left: StoredUser, _ right: StoredUser, newestFirst: Bool) -> Bool {
        switch (left.createdAt, right.createdAt) {
        case let (l?, r?) where l != r: return newestFirst ? l > r : l < r
        case (.some, nil): return true
        case (nil, .some): return false
        default: return left.id.uuidString.lowercased() < right.id.uuidString.lowercased()
        }
    }

    public struct Group: Sendable, Encodable, Equatable {
        /// The normalised email. Redact it before printing it anywhere that is logged.
        public let email: String
        public let users: Int
        /// Some rows have the identical email.
        public let exact: Bool
        /// Some rows differ, in letter case, surrounding spaces or Unicode form.
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
        try reading(on: connection, groups)
    }

    /// Users whose stored email the current rule refuses outright (issue 42, item 6: an address literal, a domain
    /// label with a leading or trailing hyphen or an `_`, stored before the rule): no canonical form exists, so no
    /// merge can rewrite them, and the service refuses the address when the person signs in with it again. Newest
    /// first. A person must be asked for another address (or the profile erased on request).
    public static func refused(on connection: Connection) throws -> [UUID] {
        try reading(on: connection) { conn in
            try storedUsers(conn).filter { Email.comparisonKey(forStored: $0.email) == nil }
                .sorted { inOrder($0, $1, newestFirst: true) }.map(\.id)
        }
    }

    /// How many stored emails have a canonical form other than themselves (merge-duplicates rewrites them).
    /// Compared as bytes: Swift's == takes canonically equivalent strings as equal.
    static func nonCanonicalCount(on connection: Connection) throws -> Int {
        try reading(on: connection) { conn in
            try storedUsers(conn).filter { user in
                Email.comparisonKey(forStored: user.email).map { !$0.utf8.elementsEqual(user.email.utf8) } ?? false
            }.count
        }
    }

    /// Runs `body` where it can read every user: as the profile role (the one role whose policy shows every
    /// user; this database's own, `ServiceRoles`) where `users` is under row-level security, inside a read-only
    /// transaction of its own.
    private static func reading<T>(on connection: Connection, _ body: (Connection) throws -> T) throws -> T {
        let profiles = try ServiceRoles.read(on: connection).profiles
        let readAsProfiles = try connection.query("""
            SELECT EXISTS (SELECT FROM pg_class WHERE oid = to_regclass('users') AND relrowsecurity)
                   AND EXISTS (SELECT FROM pg_roles WHERE rolname = \(profiles))
            """)[0].decode(0, as: Bool.self)
        guard readAsProfiles else { return try body(connection) }
        if connection.transactionState == .inTransaction {
            return try connection.savepoint { conn in
                try conn.actAs(profiles)
                defer { _ = try? conn.actAs(nil) }
                return try body(conn)
            }
        }
        return try connection.transaction { conn in
            try conn.executeScript("SET TRANSACTION READ ONLY")
            try conn.actAs(profiles)
            return try body(conn)
        }
    }

    private static func groups(_ connection: Connection) throws -> [Group] {
        duplicateGroups(try storedUsers(connection)).map { key, users -> Group in
            // Distinct as stored bytes: a Set of Strings would hold canonically equivalent spellings as one.
            let spellings = Set(users.map { Array($0.email.utf8) }).count
            let newestFirst = users.sorted { inOrder($0, $1, newestFirst: true) }
            return Group(email: key, users: users.count, exact: spellings < users.count, normalized: spellings > 1,
                         newestCreatedAt: users.compactMap(\.createdAt).max(), userIDs: newestFirst.map(\.id))
        }
        .sorted { left, right in
            switch (left.newestCreatedAt, right.newestCreatedAt) {
            case let (l?, r?) where l != r: return l > r
            case (.some, nil): return true
            case (nil, .some): return false
            default: return left.email < right.email
            }
        }
    }

    /// Groups, or none when there is no `users` table yet (a fresh database).
    static func findIfUsersExist(on connection: Connection) throws -> [Group] {
        let exists = try connection.query("SELECT to_regclass('users') IS NOT NULL")[0].decode(0, as: Bool.self)
        return exists ? try find(on: connection) : []
    }
}
