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
    let database = Database(pool: pools.requests, readPool: pools.reads, timeouts: configuration.timeouts,
                            deviceSlots: DeviceSlots(wait: configuration.deviceWait),
                            quotas: configuration.quotas, rates: configuration.rates,
                            requiresSynchronousStandby: configuration.requiresSynchronousStandby)
    let tokens = try await TokenVerifier(secret: configuration.jwtSecret, requirements: configuration.tokenRequirements)
    let clientNetwork = ClientNetwork(trustedProxies: configuration.trustedProxies,
                                      keys: NetworkKeys(configured: configuration.networkKeySecret, tokenSecret: configuration.jwtSecret))
    // On the background connection (shared with the erasures), not the probe's: a schema check never makes
    // readiness wait, and no instance opens a connection more for it.
    let schema = SchemaGate(pool: pools.background, logger: logger)
    let routes = APIControllers(database: database, probe: pools.probe, tokens: tokens, metrics: registry,
                                maxExports: configuration.maxExports, clientNetwork: clientNetwork, schema: schema)
    // The route templates, to answer a known path with a wrong method 405 and `Allow`.
    let templates = Router(context: APIContext.self)
    routes.register(on: templates)
    let router = Router(context: APIContext.self)
    router.middlewares.add(APIMiddleware(logger: logger, tokensCommits: pools.reads != nil, metrics: RequestMetrics(registry: registry),
                                         errors: ErrorMiddleware(routes: RouteTable(templates)), schema: schema))
    routes.register(on: router)

    // /metrics on a listener of its own (loopback by default): pool sizes and request counts are not for the public.
    let metricsRouter = Router(context: APIContext.self)
    metricsRouter.middlewares.add(ErrorMiddleware(routes: nil))
    metricsRouter.get("/metrics", use: routes.operations.prometheus)
    let metrics = Application(
        router: metricsRouter,
        configuration: .init(address: .hostname(configuration.metricsHost, port: configuration.metricsPort), serverName: nil),
        onServerRunning: { channel in await onMetricsListening(channel.localAddress?.port ?? configuration.metricsPort) },
        logger: logger)
    Task { await RLSBypassWarning.check(pools.probe, logger: logger) }
    // Our own request path (APIChildChannel); Hummingbird's responder closure, which writes through
    // NIOAsyncChannel, is not used.
    let requests = RequestRunner(responder: router.buildResponder(), executor: pools.requests.taskExecutor(), logger: logger)
    let requestTimeout = TimeAmount(configuration.requestTimeout), idleTimeout = TimeAmount(configuration.idleTimeout)
    let perAddress = ConnectionsPerAddress(limit: configuration.maxConnectionsPerAddress, clientNetwork: clientNetwork)
    return Application(
        responder: requests.responder,
        server: HTTPServerBuilder { _ in
            APIChildChannel(requests: requests, requestTimeout: requestTimeout, idleTimeout: idleTimeout, perAddress: perAddress)
        },
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil,
                             availableConnectionsDelegate: MaximumAvailableConnections(configuration.maxConnections, logger: logger)),
        services: [PoolShutdown(pools: pools, logger: logger), metrics, SchemaWatch(gate: schema, interval: configuration.schemaCheckInterval)]
            + (configuration.erasureInterval.map { interval in
                [ErasureWorker(erasures: PendingErasures(database: Database(pool: pools.background, timeouts: configuration.timeouts)),
                               interval: interval, logger: logger)] } ?? [])
            + (configuration.bucketSweepInterval.map { interval in
                [BucketSweeper(database: Database(pool: pools.background, timeouts: configuration.timeouts, rates: configuration.rates),
                               interval: interval, logger: logger)] } ?? []),
        onServerRunning: { channel in await onListening(channel.localAddress?.port ?? configuration.port) },
        logger: logger)
}
