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
    /// every client is answered and the process exits within 10 s.
    public var shutdownGrace: Duration = .seconds(6)
    public var jwtSecret: String
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
    public var database: ConnectionConfiguration
    /// Standbys for read-only requests (`POOPYPALS_READ_DATABASE_URL`); nil: everything on `database`.
    public var readDatabase: ConnectionConfiguration?

    public init(jwtSecret: String, database: ConnectionConfiguration) {
        self.jwtSecret = jwtSecret
        self.database = database
    }
}

/// The service's database pools: one for requests, one connection for readiness probes, and one for reads on
/// standbys when configured.
struct APIPools: Sendable {
    let requests: ConnectionPool
    let probe: ConnectionPool
    let reads: ConnectionPool?

    init(_ configuration: APIConfiguration) {
        requests = ConnectionPool(configuration: .init(connection: configuration.database, maxConnections: configuration.poolSize,
                                                       acquireTimeout: configuration.acquireTimeout))
        probe = ConnectionPool(configuration: .init(connection: configuration.database, maxConnections: 1,
                                                    acquireTimeout: .seconds(1)))
        // On the request pool's threads, where every HTTP connection runs: a read's body runs inline there.
        reads = configuration.readDatabase.map { [requests] in
            ConnectionPool(configuration: .init(connection: $0, maxConnections: configuration.poolSize, acquireTimeout: configuration.acquireTimeout),
                           sharingThreadsWith: requests)
        }
    }

    func close(cancellingInFlight: Bool = false) async {
        await requests.close(cancellingInFlight: cancellingInFlight)
        await probe.close(cancellingInFlight: cancellingInFlight)
        await reads?.close(cancellingInFlight: cancellingInFlight)
    }
}

/// Builds the HTTP application (tests call this too). `onListening` receives the bound port, useful with port 0;
/// `onMetricsListening` the metrics listener's.
/// - Throws: `ConfigurationError` for an unusable JWT secret.
public func buildApplication(
    _ configuration: APIConfiguration, logger: Logger = Logger(label: "poopypals.http"),
    onListening: @escaping @Sendable (Int) async -> Void = { _ in },
    onMetricsListening: @escaping @Sendable (Int) async -> Void = { _ in }
) async throws -> some ApplicationProtocol {
    try await buildApplication(configuration, pools: APIPools(configuration), logger: logger, onListening: onListening,
                               onMetricsListening: onMetricsListening)
}

func buildApplication(
    _ configuration: APIConfiguration, pools: APIPools, logger: Logger,
    onListening: @escaping @Sendable (Int) async -> Void,
    onMetricsListening: @escaping @Sendable (Int) async -> Void = { _ in }
) async throws -> some ApplicationProtocol {
    // Before anything creates a metric: one made before the backend exists stays a no-op for good.
    let registry = APIMetrics.registry
    let database = Database(pool: pools.requests, readPool: pools.reads, timeouts: configuration.timeouts)
    let tokens = try await TokenVerifier(secret: configuration.jwtSecret, requirements: configuration.tokenRequirements)
    let routes = APIRoutes(database: database, probe: pools.probe, tokens: tokens, metrics: registry)
    // The route templates, to answer a known path with a wrong method 405 and `Allow`.
    let templates = Router(context: APIContext.self)
    routes.register(on: templates)
    let router = Router(context: APIContext.self)
    router.middlewares.add(RequestLogMiddleware(logger: logger, tokensCommits: pools.reads != nil))
    router.middlewares.add(RequestMetricsMiddleware(metrics: RequestMetrics(registry: registry)))
    router.middlewares.add(ErrorMiddleware(routes: RouteTable(templates)))
    router.middlewares.add(StrictQueryMiddleware())
    routes.register(on: router)

    // /metrics on a listener of its own (loopback by default): pool sizes and request counts are not for the public.
    let metricsRouter = Router(context: APIContext.self)
    metricsRouter.middlewares.add(ErrorMiddleware(routes: nil))
    metricsRouter.get("/metrics", use: routes.prometheus)
    let metrics = Application(
        router: metricsRouter,
        configuration: .init(address: .hostname(configuration.metricsHost, port: configuration.metricsPort), serverName: nil),
        onServerRunning: { channel in await onMetricsListening(channel.localAddress?.port ?? configuration.metricsPort) },
        logger: logger)
    Task { await RLSBypassWarning.check(pools.probe, logger: logger) }
    let http1 = HTTP1Channel.Configuration(
        additionalChannelHandlers: [ParserErrorResponder(requestTimeout: TimeAmount(configuration.requestTimeout))],
        idleTimeout: TimeAmount(configuration.idleTimeout),
        httpDecoderConfiguration: .init(maxHeaderFieldSize: ParserErrorResponder.maxFieldSize,
                                        maxHeaderListSize: ParserErrorResponder.maxHeaderSize,
                                        maxHeaderFieldCount: ParserErrorResponder.maxFieldCount))
    let executor = pools.requests.taskExecutor()
    return Application(
        router: router,
        server: HTTPServerBuilder { responder in
            ExecutorChildChannel(base: HTTP1Channel(responder: responder, configuration: http1), executor: executor)
        },
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil,
                             availableConnectionsDelegate: MaximumAvailableConnections(configuration.maxConnections, logger: logger)),
        services: [PoolShutdown(pools: pools, logger: logger), metrics],
        onServerRunning: { channel in await onListening(channel.localAddress?.port ?? configuration.port) },
        logger: logger)
}

/// A login that is superuser or has BYPASSRLS ignores every policy, FORCEd or not: say so loudly at start.
enum RLSBypassWarning {
    static func check(_ pool: ConnectionPool, logger: Logger) async {
        guard let bypasses = try? await pool.withConnection({ connection in
            try connection.query("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
                .first?.decode(0, as: Bool.self)
        }), bypasses == true else { return }
        logger.warning("the database login is a superuser or has BYPASSRLS: row-level security does not protect anything; use a non-superuser owner (see README)")
    }
}

/// Builds and runs the service until SIGTERM or SIGINT. Then: stop accepting, let in-flight requests run for
/// `shutdownGrace`, cancel on the server whatever still runs (those clients get 503 `timeout`), close the
/// pools, exit — within 10 seconds.
/// - Throws: `ConfigurationError` before listening when the configuration is unusable.
public func serve(
    _ configuration: APIConfiguration, logger: Logger, onListening: @escaping @Sendable (Int) async -> Void,
    onMetricsListening: @escaping @Sendable (Int) async -> Void = { _ in }
) async throws {
    let pools = APIPools(configuration)
    let application = try await buildApplication(configuration, pools: pools, logger: logger, onListening: onListening,
                                                 onMetricsListening: onMetricsListening)
    // Services shut down last first: the deadline starts its clock, then the server drains.
    var group = ServiceGroupConfiguration(
        services: [.init(service: application), .init(service: ShutdownDeadline(pools: pools, grace: configuration.shutdownGrace, logger: logger),
                                                                successTerminationBehavior: .ignore)],
        gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
    group.maximumGracefulShutdownDuration = .seconds(9)
    try await ServiceGroup(configuration: group).run()
}

/// On graceful shutdown, gives in-flight requests `grace`, then cancels their statements on the server.
struct ShutdownDeadline: Service {
    let pools: APIPools
    let grace: Duration
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        let pools = pools, grace = grace, logger = logger
        // Not awaited: the server drains meanwhile, and the group waits for this service to return first.
        Task {
            try? await Task.sleep(for: grace)
            let busy = pools.requests.statistics.inUse
            if busy > 0 { logger.warning("shutdown grace over; cancelling in-flight statements", metadata: ["in_use": "\(busy)"]) }
            await pools.close(cancellingInFlight: true)
        }
    }
}

/// Closes the pools once the server has drained (services shut down in reverse order: the server first).
struct PoolShutdown: Service {
    let pools: APIPools
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        await pools.close()
        logger.info("database pool closed")
    }
}

/// The process-wide Prometheus registry behind swift-metrics, set up once.
enum APIMetrics {
    static let registry: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        // Prometheus names allow [a-zA-Z0-9_:]; Hummingbird's metrics use dots.
        factory.nameAndLabelSanitizer = { name, labels in
            (sanitize(name), labels.map { (sanitize($0.0), $0.1) })
        }
        MetricsSystem.bootstrap(factory)
        return registry
    }()

    static func sanitize(_ name: String) -> String {
        String(name.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == ":") ? $0 : "_" })
    }
}
