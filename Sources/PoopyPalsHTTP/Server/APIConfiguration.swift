import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import Metrics
import NIOCore
import PoopyPalsData
import PostgresClient
import Prometheus
import ServiceLifecycle

/// How `poopypals serve` runs.
public struct APIConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    public var poolSize = 10
    /// How long a request waits for a free database connection before a 503 `busy`.
    public var acquireTimeout: Duration = .seconds(3)
    /// Statement and lock time limits of every request transaction.
    public var timeouts = RequestTimeouts.default
    /// After SIGTERM, in-flight requests get this long; then their statements are cancelled on the server, so
    /// every client is answered and the process exits within 10 s (`POOPYPALS_SHUTDOWN_GRACE`, at most
    /// `longestShutdownGrace`: the cancelled requests need the rest to be answered before the hard stop at 9 s).
    public var shutdownGrace: Duration = .seconds(6)
    public static let longestShutdownGrace: Duration = .seconds(8)
    public var jwtSecret: String
    /// The secret of the registration buckets' keys (`POOPYPALS_NETWORK_KEY_SECRET`); nil: derived from `jwtSecret`
    /// (`NetworkKeys`). The same on every instance, or the limit counts each instance's registrations apart.
    public var networkKeySecret: String?
    /// `AUTH_JWT_ISSUER` / `AUTH_JWT_AUDIENCE`.
    public var tokenRequirements = TokenRequirements()
    /// `/metrics` listens here, apart from the API (`POOPYPALS_METRICS_PORT`; 0 picks a free port).
    public var metricsHost = "127.0.0.1"
    public var metricsPort = 9464
    /// A connection that sends nothing for this long is closed: an idle keep-alive connection, or a client
    /// that stops in the middle of its headers or body (`POOPYPALS_IDLE_TIMEOUT`).
    public var idleTimeout: Duration = .seconds(30)
    /// A request's headers must arrive within this (from the connection's start or the previous response's
    /// end), and then its body within it again: else 408 and the connection is closed
    /// (`POOPYPALS_REQUEST_TIMEOUT`). Bounds clients that trickle bytes, which the idle timeout does not.
    public var requestTimeout: Duration = .seconds(30)
    /// Connections held at once; beyond it, new ones wait in the kernel's backlog (`POOPYPALS_MAX_CONNECTIONS`).
    public var maxConnections = 8192
    /// Connections one client address (IPv4 address, IPv6 /64) may hold at once; more are closed at once
    /// (`POOPYPALS_MAX_CONNECTIONS_PER_ADDRESS`). Trusted proxies are exempt.
    public var maxConnectionsPerAddress = 256
    /// What one device may store (`POOPYPALS_MAX_LOGS_PER_DEVICE`, `POOPYPALS_MAX_TOMBSTONES_PER_DEVICE`).
    public var quotas = DeviceQuotas.default
    /// Write transactions first make sure their server has a synchronous standby, and are refused (503
    /// `database_unavailable`) where it has none (`POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY`; sql/0039): for a deployment
    /// with synchronous standbys, so that no write is acknowledged with one copy after a failover.
    public var requiresSynchronousStandby = false
    /// Log writes per device and registrations per client network (`POOPYPALS_DEVICE_WRITE_BURST`, …).
    public var rates = RateLimits.default
    /// Proxies whose `X-Forwarded-For` names the client (`POOPYPALS_TRUSTED_PROXIES`); from anyone else it is ignored.
    public var trustedProxies: [String] = []
    /// How long a device's request waits for one of its 2 slots at the database (`DeviceSlots`) before 429
    /// `device_busy`.
    public var deviceWait: Duration = .seconds(3)
    /// Exports prepared or streamed at once, one per device (`POOPYPALS_MAX_EXPORTS`); beyond it 429 `export_busy`.
    public var maxExports = 4
    /// How often the background looks for device erasures to finish (`ErasureWorker`); nil: never (tests).
    public var erasureInterval: Duration? = .seconds(5)
    /// How often the background deletes the registration buckets that have refilled (`RegistrationBuckets`); nil:
    /// never (tests).
    public var bucketSweepInterval: Duration? = .seconds(60)
    /// How often the instance asks whether its release can serve the database's schema (`SchemaGate`), beside
    /// `/readyz` and right after an error a schema change causes.
    public var schemaCheckInterval: Duration = .seconds(5)
    public var database: ConnectionConfiguration
    /// Standbys for read-only requests (`POOPYPALS_READ_DATABASE_URL`); nil: everything on `database`.
    public var readDatabase: ConnectionConfiguration?

    public init(jwtSecret: String, database: ConnectionConfiguration) {
        self.jwtSecret = jwtSecret
        self.database = database
    }
}
