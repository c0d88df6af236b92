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
