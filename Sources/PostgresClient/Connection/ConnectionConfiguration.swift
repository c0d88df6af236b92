import Foundation

/// Where and how to connect.
public struct ConnectionConfiguration: Sendable {
    /// A libpq connection URI (`postgresql://…`) or `key=value` string, handed to libpq untouched.
    /// `nil` means libpq's own `PG*` environment variables and defaults.
    public var connectionString: String?
    /// Overrides the database named by `connectionString` (used by tests to reach a database of their own).
    public var database: String?
    /// Reported in `pg_stat_activity` unless the connection string sets `application_name`.
    public var applicationName: String
    /// Seconds libpq waits for a connection to each host of the URL, unless the connection string sets
    /// `connect_timeout` (`serve` makes it 4: a dead or hung first host costs seconds, then the next is tried).
    public var connectTimeoutSeconds: Int
    /// Caches named prepared statements per connection. Turn off behind a pooler that cannot keep them
    /// across transactions (PgBouncer before 1.21 in transaction mode): statements are then sent unnamed,
    /// still in one round trip each.
    public var statementCache: Bool
    /// At most this many prepared statements per connection; the least recently used is closed first.
    public var statementCacheCapacity = 256
    /// The server ends a session left idle inside a transaction this long (a hung client must not hold locks).
    public var idleInTransactionTimeout: Duration = .seconds(60)
    /// TCP: unacknowledged data older than this breaks the connection (with keepalives every 10 s after 30 s idle).
    public var tcpUserTimeoutMilliseconds = 30_000

    /// Startup options: the session settings decoding relies on, and the idle-in-transaction limit.
    var startupOptions: String {
        // Clamped to what the server accepts (an int of milliseconds); 0 turns the limit off.
        let seconds = min(max(0, idleInTransactionTimeout.components.seconds), 2_000_000)
        let idle = seconds * 1000 + max(0, idleInTransactionTimeout.components.attoseconds) / 1_000_000_000_000_000
        return "-c DateStyle=ISO,MDY -c TimeZone=UTC -c idle_in_transaction_session_timeout=\(idle)"
    }

    public init(
        connectionString: String? = nil, database: String? = nil, applicationName: String = "poopypals",
        connectTimeoutSeconds: Int = 10, statementCache: Bool = true
    ) {
        self.connectionString = connectionString
        self.database = database
        self.applicationName = applicationName
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.statementCache = statementCache
    }

    /// The explicit URL if given, else `DATABASE_URL`, else libpq's `PG*` variables. Empty values count as unset.
    /// The caller passes the environment (the CLI's): the driver reads none of the application's variables itself.
    public static func resolve(databaseURL: String?, environment: [String: String]) -> ConnectionConfiguration {
        let explicit = databaseURL.flatMap { $0.isEmpty ? nil : $0 }
        let fromEnvironment = environment["DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        var configuration = ConnectionConfiguration(connectionString: explicit ?? fromEnvironment)
        if let cache = environment["POOPYPALS_STATEMENT_CACHE"], ["0", "off", "false", "no"].contains(cache.lowercased()) {
            configuration.statementCache = false
        }
        return configuration
    }

    /// Secrets that must never appear in a message: the password in the connection string.
    var secrets: [String] {
        connectionString.map(ConnectionStringSecrets.passwords(in:)) ?? []
    }
}
