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

/// Builds and runs the service until SIGTERM or SIGINT. Then: stop accepting, let in-flight requests run for
/// `shutdownGrace`, cancel on the server whatever still runs (those clients get 503 `timeout`), close the
/// pools, exit — within 10 seconds.
/// - Throws: `ConfigurationError` before listening when the configuration is unusable.
public func serve(
    _ configuration: APIConfiguration, logger: Logger, onListening: @escaping @Sendable (Int) async -> Void,
    onMetricsListening: @escaping @Sendable (Int) async -> Void = { _ in }
) async throws {
    let pools = APIPools(configuration)
    do {
        try await serve(configuration, pools: pools, logger: logger, onListening: onListening, onMetricsListening: onMetricsListening)
    } catch let error as IOError {
        throw listenFailure(error, configuration) ?? error
    }
}

/// A listener that could not bind, said as the addresses it tried and what to change (NIO says
/// `bind(descriptor:ptr:bytes:): Address already in use) (errno: 98)`). A listener on port 0 picks a free port, so
/// it is not named; nil for an error that is not a bind's.
func listenFailure(_ error: IOError, _ configuration: APIConfiguration) -> ConfigurationError? {
    let why: String
    switch error.errnoCode {
    case EADDRINUSE: why = "the address is in use: another process listens there"
    case EACCES: why = "permission denied: a port below 1024 needs privileges (CAP_NET_BIND_SERVICE)"
    case EADDRNOTAVAIL: why = "the address is not one of this machine's"
    default: return nil
    }
    var tried: [String] = []
    if configuration.port != 0 { tried.append("\(configuration.host):\(configuration.port) (the API; --port or PORT)") }
    if configuration.metricsPort != 0 {
        tried.append("\(configuration.metricsHost):\(configuration.metricsPort) (/metrics; --metrics-port or POOPYPALS_METRICS_PORT)")
    }
    return ConfigurationError("cannot listen on \(tried.isEmpty ? "a free port" : tried.joined(separator: " or ")): \(why)")
}

private func serve(
    _ configuration: APIConfiguration, pools: APIPools, logger: Logger, onListening: @escaping @Sendable (Int) async -> Void,
    onMetricsListening: @escaping @Sendable (Int) async -> Void
) async throws {
    let application = try await buildApplication(configuration, pools: pools, logger: logger, onListening: onListening,
                                                 onMetricsListening: onMetricsListening)
    // Services shut down last first: the deadline starts its clock, then the server drains.
    var group = ServiceGroupConfiguration(
        services: [.init(service: application), .init(service: ShutdownDeadline(pools: pools, grace: min(configuration.shutdownGrace, APIConfiguration.longestShutdownGrace), logger: logger),
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
