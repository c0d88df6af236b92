import Foundation
import PostgresClient

/// Statements as the server's superuser (`POOPYPALS_TEST_SUPERUSER_URL`, which `make test` sets): what an
/// operator does beside the service (grants, a second owner and database).
public enum Superuser {
    /// `POOPYPALS_TEST_SUPERUSER_URL` with its database (the URL's path) replaced by `database`, whatever database
    /// the URL names (`postgres` for scripts/db.sh, `poopypals` for scripts/citus.sh). Swapping the text
    /// "/postgres?" left a URL naming another database untouched: on the Citus coordinator a dump of a test database
    /// was a dump of the cluster's own, empty one.
    public static func url(database: String) throws -> String {
        guard let url = PgDump.superuserURL else { throw SetupError("POOPYPALS_TEST_SUPERUSER_URL is not set") }
        guard var components = URLComponents(string: url), components.scheme?.hasPrefix("postgres") == true else {
            throw SetupError("POOPYPALS_TEST_SUPERUSER_URL is not a postgresql:// URL")
        }
        components.path = "/" + database
        // 30 s to log in, as TestDatabase.url: libpq's default (none; `serve` makes it 4 s) was outlived under load.
        components.waitThirtySecondsToConnect()
        guard let swapped = components.string else { throw SetupError("cannot rebuild the superuser URL for \(database)") }
        return swapped
    }

    /// Runs each statement on its own (CREATE and DROP DATABASE refuse the implicit transaction of a
    /// multi-statement string), in `database`, on a connection of its own.
    public static func execute(_ statements: String..., in database: String = "postgres") async throws {
        try await on(database) { conn in for sql in statements { _ = try conn.executeScript(sql) } }
    }

    /// The first column of every row `sql` returns, as text.
    public static func column(_ sql: String, in database: String = "postgres") async throws -> [String] {
        try await on(database) { conn in try conn.query(PostgresQuery(unsafeSQL: sql)).map { try $0.decode(0, as: String.self) } }
    }

    private static func on<T: Sendable>(_ database: String, _ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        guard let url = PgDump.superuserURL else { throw SetupError("POOPYPALS_TEST_SUPERUSER_URL is not set") }
        // A database reached as the superuser: its one-off session is TestDatabase's.
        return try await TestDatabase(name: database, configuration: ConnectionConfiguration(connectionString: url, database: database,
                                                                                              connectTimeoutSeconds: 30))
            .withConnection(body)
    }
}
