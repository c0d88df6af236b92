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

/// The service's database pools: one for requests, one connection for readiness probes, one connection for work in
/// the background (finishing erasures and asking whether this release serves the schema, `SchemaGate`: it never
/// takes a connection a request could use), and one for reads on
/// standbys when configured. The probe and background connections open when first used.
struct APIPools: Sendable {
    let requests: ConnectionPool
    let probe: ConnectionPool
    let background: ConnectionPool
    let reads: ConnectionPool?

    init(_ configuration: APIConfiguration) {
        requests = ConnectionPool(configuration: .init(connection: configuration.database, maxConnections: configuration.poolSize,
                                                       acquireTimeout: configuration.acquireTimeout))
        probe = ConnectionPool(configuration: .init(connection: configuration.database, maxConnections: 1,
                                                    acquireTimeout: .seconds(1)))
        background = ConnectionPool(configuration: .init(connection: configuration.database, maxConnections: 1,
                                                         acquireTimeout: .seconds(5)))
        // On the request pool's threads, where every HTTP connection runs: a read's body runs inline there.
        reads = configuration.readDatabase.map { [requests] in
            ConnectionPool(configuration: .init(connection: $0, maxConnections: configuration.poolSize, acquireTimeout: configuration.acquireTimeout),
                           sharingThreadsWith: requests)
        }
    }

    func close(cancellingInFlight: Bool = false) async {
        await requests.close(cancellingInFlight: cancellingInFlight)
        await probe.close(cancellingInFlight: cancellingInFlight)
        await background.close(cancellingInFlight: cancellingInFlight)
        await reads?.close(cancellingInFlight: cancellingInFlight)
    }
}
