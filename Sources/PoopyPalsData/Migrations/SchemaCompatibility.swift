import Foundation
import PostgresClient
import Values

/// Whether this release can serve a database's schema (issue 55). A release that cannot says so and writes nothing:
/// the HTTP layer answers 503 with the verdict's `code` until the schema changes or the instance is replaced.
public enum SchemaCompatibility: Sendable, Equatable {
    /// This release's pre-deployment migrations are applied and the database takes releases as old as this one.
    case serves
    /// The newest migration this release needs is not applied: `poopypals migrate` has not run for this release.
    case behind(newestApplied: Int64?, required: Int64)
    /// Post-deployment migrations of a later release ran: the database's oldest supported release is newer than
    /// this one (`poopypals_oldest_release()`), and what this release uses may be gone.
    case releaseTooOld(oldestSupported: SemanticVersion, release: SemanticVersion)

    public var serves: Bool { self == .serves }

    /// The error code a request and `/readyz` are answered with (503); nil when it serves.
    public var code: String? {
        switch self {
        case .serves: nil
        case .behind: "schema_behind"
        case .releaseTooOld: "release_unsupported"
        }
    }

    /// For the log and the refusal: both versions, nothing else (no host, no user).
    public var explanation: String {
        switch self {
        case .serves:
            return "release \(Release.version) serves this database's schema"
        case .behind(let applied, let required):
            let newest = applied.map { String(format: "%04lld", $0) } ?? "none"
            return "release \(Release.version) needs migration \(String(format: "%04lld", required)); the database's newest "
                + "is \(newest): run `poopypals migrate` with this release"
        case .releaseTooOld(let oldest, let release):
            return "release \(release) cannot serve this database: its post-deployment migrations require release \(oldest) "
                + "or newer; replace this instance with that release"
        }
    }

    /// Asks the database, as the connecting role (no transaction is needed: reads of the catalog and of the
    /// migrations' history). Two round trips at most.
    /// - Throws: `PostgresError` when the history or the marker cannot be read (no privilege): not a verdict.
    public static func check(on connection: Connection, release: SemanticVersion = Release.version,
                             required: Int64 = Release.requiredMigration) throws -> SchemaCompatibility {
        let found = try connection.query("""
            SELECT to_regclass('schema_migrations') IS NOT NULL AS history,
                   to_regprocedure('poopypals_oldest_release()') IS NOT NULL AS marked
            """)[0]
        guard try found.decode("history", as: Bool.self) else { return .behind(newestApplied: nil, required: required) }
        let marked: Bool = try found.decode("marked")
        let row = try marked
            ? connection.query("""
                SELECT (SELECT max(version) FROM schema_migrations) AS newest,
                       EXISTS (SELECT 1 FROM schema_migrations WHERE version = \(required)) AS migrated,
                       poopypals_oldest_release() AS oldest
                """)[0]
            : connection.query("""
                SELECT (SELECT max(version) FROM schema_migrations) AS newest,
                       EXISTS (SELECT 1 FROM schema_migrations WHERE version = \(required)) AS migrated, NULL::text AS oldest
                """)[0]
        guard try row.decode("migrated", as: Bool.self) else {
            return .behind(newestApplied: try row.decode("newest", as: Int64?.self), required: required)
        }
        // Marked since sql/0036; a value that is not a release number is a broken marker: serve, it says nothing.
        if let text = try row.decode("oldest", as: String?.self), let oldest = SemanticVersion(text), oldest > release {
            return .releaseTooOld(oldestSupported: oldest, release: release)
        }
        return .serves
    }
}

extension SchemaCompatibility {
    /// True when `error` is what a schema this release cannot serve makes a request meet (a table, column, function,
    /// role, grant or constraint gone or changed: SQLSTATE class 42): worth asking `check` again at once, rather
    /// than answering 500 until the next periodic check.
    public static func mayFollowASchemaChange(_ error: any Error) -> Bool {
        PostgresError.find(in: error)?.sqlState.errorClass == .syntaxErrorOrAccessRuleViolation
    }
}
