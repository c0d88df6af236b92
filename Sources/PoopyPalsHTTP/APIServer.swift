import Foundation
import Hummingbird
import Logging
import Metrics
import PoopyPalsData
import PostgresClient
import Prometheus
import ServiceLifecycle

/// How `poopypals serve` runs.
public struct APIConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    public var poolSize = 10
    public var jwtSecret: String
    public var database: ConnectionConfiguration

    public init(jwtSecret: String, database: ConnectionConfiguration) {
        self.jwtSecret = jwtSecret
        self.database = database
    }
}

/// Builds the HTTP application (tests call this too). `onListening` receives the bound port, useful with port 0.
/// - Throws: `ConfigurationError` for an unusable JWT secret.
public func buildApplication(
    _ configuration: APIConfiguration, logger: Logger = Logger(label: "poopypals.http"),
    onListening: @escaping @Sendable (Int) async -> Void = { _ in }
) async throws -> some ApplicationProtocol {
    let pool = ConnectionPool(configuration: .init(connection: configuration.database, maxConnections: configuration.poolSize,
                                                   acquireTimeout: .seconds(5)))
    let routes = APIRoutes(database: Database(pool: pool), tokens: try await TokenVerifier(secret: configuration.jwtSecret),
                           metrics: APIMetrics.registry)
    let router = Router(context: APIContext.self)
    router.middlewares.add(RequestLogMiddleware(logger: logger))
    router.middlewares.add(MetricsMiddleware<APIContext>())
    router.middlewares.add(ErrorMiddleware())
    routes.register(on: router)
    return Application(
        router: router,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
        services: [PoolShutdown(pool: pool, logger: logger)],
        onServerRunning: { channel in await onListening(channel.localAddress?.port ?? configuration.port) },
        logger: logger)
}

/// Builds and runs the service until SIGTERM or SIGINT, then stops accepting, lets in-flight requests finish,
/// and closes the pool, within 10 seconds.
/// - Throws: `ConfigurationError` before listening when the configuration is unusable.
public func serve(
    _ configuration: APIConfiguration, logger: Logger, onListening: @escaping @Sendable (Int) async -> Void
) async throws {
    let application = try await buildApplication(configuration, logger: logger, onListening: onListening)
    var group = ServiceGroupConfiguration(services: [application], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
    group.maximumGracefulShutdownDuration = .seconds(9)
    try await ServiceGroup(configuration: group).run()
}

/// Closes the pool once the server has drained (services shut down in reverse order: the server first).
struct PoolShutdown: Service {
    let pool: ConnectionPool
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        await pool.close()
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
