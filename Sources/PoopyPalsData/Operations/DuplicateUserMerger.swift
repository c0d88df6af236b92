import Foundation
import Logging
import PostgresClient

/// Repairs fragmented accounts: for each email with several users under `Email`'s canonical form, keeps one
/// (oldest `created_at`, then smallest id), points every reference at it, deletes the others, and stores every
/// email in its canonical form. One transaction; running it again finds nothing to do.
public struct DuplicateUserMerger: Sendable {
    public struct Group: Sendable, Encodable {
        public let email: String
        public let canonical: UUID
        public let merged: [UUID]
    }

    public struct Report: Sendable, Encodable {
        public let groups: [Group]
        /// References moved, by `table.column`.
        public let referencesMoved: [String: Int]
        public let emailsNormalized: Int
        public let dryRun: Bool

        public var usersMerged: Int { groups.reduce(0) { $0 + $1.merged.count } }
        public var totalReferencesMoved: Int { referencesMoved.values.reduce(0, +) }
    }

    public struct UnsupportedReference: Error, CustomStringConvertible {
        public let constraint: String
        public var description: String {
            "foreign key \(constraint) references users with several columns; merge it by hand"
        }
    }

    private let logger = Logger(label: "poopypals.users.merge")

    public init() {}

    /// With `dryRun`, does all of it and rolls back: what it prints is exactly what it would do.
    /// - Throws: `PostgresError`; `UnsupportedReference` for a multi-column foreign key to users.
    public func run(on connection: Connection, dryRun: Bool) throws -> Report {
        do {
            return try connection.transaction { conn in
                let report = try merge(on: conn, dryRun: dryRun)
                if dryRun { throw DryRunRollback(report: report) }
                return report
            }
        } catch let rollback as DryRunRollback {
            return rollback.report
        }
    }

    private func merge(on conn: Connection, dryRun: Bool) throws -> Report {
        // No one may add or change users while we merge them.
        try conn.executeScript("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE")
        // users is under forced row-level security (sql/0008): the owner sees no user unless it is lifted, inside
        // this transaction only, and put back before the commit.
        let usersForced = try conn.query("SELECT relforcerowsecurity FROM pg_class WHERE oid = 'users'::regclass")[0].decode(0, as: Bool.self)
        if usersForced { try conn.executeScript("ALTER TABLE users NO FORCE ROW LEVEL SECURITY") }
        defer { if usersForced, conn.transactionState == .inTransaction { _ = try? conn.executeScript("ALTER TABLE users FORCE ROW LEVEL SECURITY") } }
        // Grouped by the canonical form (`DuplicateEmails`, the monitor's own grouping); the oldest row is kept.
        let stored = try DuplicateEmails.storedUsers(conn)
        let groups = DuplicateEmails.duplicateGroups(stored).map { key, users in
            Group(email: key, canonical: users[0].id, merged: users.dropFirst().map(\.id))
        }

        // Every foreign key that references users, found in the catalog.
        let references = try conn.query("""
            SELECT c.conname, c.conrelid::regclass::text AS tbl, c.relforce, array_length(c.conkey, 1) AS columns,
                   (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attnum = c.conkey[1]) AS col
            FROM (SELECT con.*, cl.relforcerowsecurity AS relforce FROM pg_constraint con
                  JOIN pg_class cl ON cl.oid = con.conrelid
                  WHERE con.contype = 'f' AND con.confrelid = 'users'::regclass) c
            ORDER BY 2, 5
            """)
        var moved: [String: Int] = [:]
        var unforced: [String] = []
        for reference in references {
            guard try reference.decode("columns", as: Int.self) == 1 else {
                throw UnsupportedReference(constraint: try reference.decode("conname"))
            }
            let table: String = try reference.decode("tbl")
            let column: String = try reference.decode("col")
            // Forced row-level security would hide other devices' rows from us: lift it inside this transaction
            // only (no other session ever sees it lifted) and put it back below.
            if try reference.decode("relforce", as: Bool.self), !unforced.contains(table) {
                // `table` is the server's own `regclass::text`: already quoted (and schema-qualified when needed).
                try conn.executeScript("ALTER TABLE " + table + " NO FORCE ROW LEVEL SECURITY")
                unforced.append(table)
            }
            var count = 0
            for group in groups {
                count += try conn.execute("""
                    UPDATE \(unescaped: table) SET \(identifier: column) = \(group.canonical)
                    WHERE \(identifier: column) = ANY(\(Self.array(group.merged))::uuid[])
                    """)
            }
            moved["\(table).\(column)"] = count
        }
        for table in unforced { try conn.executeScript("ALTER TABLE " + table + " FORCE ROW LEVEL SECURITY") }

        for group in groups {
            try conn.execute("DELETE FROM users WHERE id = ANY(\(Self.array(group.merged))::uuid[])")
            logger.notice(dryRun ? "would merge duplicate users (dry run)" : "merged duplicate users", metadata: [
                "email": "\((try? Email(group.email).redacted) ?? "***")", "kept": "\(redacted(group.canonical))",
                "merged": "\(group.merged.count)",
            ])
        }
        // Every remaining email in its canonical form. A value that is no address at all is left as it is: rewriting
        // it could not satisfy the email checks, and the failed update would roll the whole merge back.
        let merged = Set(groups.flatMap(\.merged))
        var normalized = 0
        for user in stored where !merged.contains(user.id) {
            guard let key = Email.comparisonKey(forStored: user.email) else { continue }
            // Compared as bytes: Swift's == holds canonically equivalent strings equal (decomposed á == á).
            if !key.utf8.elementsEqual(user.email.utf8) {
                normalized += try conn.execute("UPDATE users SET email = \(key) WHERE id = \(user.id)")
            }
        }
        // Once every email is normalised, the checks added NOT VALID (for legacy data) can be validated.
        try conn.executeScript("""
            DO $$
            DECLARE
                name text;
            BEGIN
                FOR name IN SELECT conname FROM pg_constraint WHERE conrelid = 'users'::regclass AND NOT convalidated
                            AND conname IN ('users_email_normalized', 'users_email_canonical') LOOP
                    BEGIN
                        EXECUTE format('ALTER TABLE users VALIDATE CONSTRAINT %I', name);
                    EXCEPTION WHEN check_violation THEN
                        NULL;  -- a row that is no address at all: the check stays NOT VALID, new rows still checked
                    END;
                END LOOP;
            END
            $$
            """)
        return Report(groups: groups, referencesMoved: moved, emailsNormalized: normalized, dryRun: dryRun)
    }

    private static func array(_ ids: [UUID]) -> String { "{" + ids.map { $0.uuidString.lowercased() }.joined(separator: ",") + "}" }
}

private struct DryRunRollback: Error {
    let report: DuplicateUserMerger.Report
}
