import Foundation
import HTTPTypes
import Hummingbird
import Prometheus

/// Request metrics by Prometheus's conventions: one `poopypals_` prefix, base units in names (seconds), `_total`
/// on counters, a `# HELP` on every family, buckets that resolve sub-millisecond requests, and errors counted by
/// class (4xx, 5xx) from the status actually answered. Labelled by the route template (`/v1/logs/{id}`), never
/// the raw path, so the number of series stays bounded whatever a client sends.
final class RequestMetrics: Sendable {
    /// 100 µs to 30 s: most requests take 0.1-5 ms, the request timeout is 30 s.
    static let buckets: [Duration] = [
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30),
    ]

    // Descriptors are not Sendable: made where a series is first made, not kept in statics.
    static var requests: MetricNameDescriptor {
        descriptor("poopypals_http_requests_total", help: "HTTP requests answered, by method, route template and status.")
    }
    static var errors: MetricNameDescriptor {
        descriptor("poopypals_http_request_errors_total", help: "HTTP requests answered with a 4xx or 5xx status, by class.")
    }
    static var duration: MetricNameDescriptor {
        descriptor("poopypals_http_request_duration_seconds",
                   help: "Time from a request's arrival until its response was ready (a streamed export: until it began), in seconds.")
    }

    /// The series of one method, route and status: looked up in the registry once (it validates every name and
    /// label on each lookup), then kept. Bounded: known methods, route templates, statuses the service answers.
    private struct Series: Sendable {
        let requests: Counter
        let duration: DurationHistogram
        let errors: Counter?
    }

    private struct Key: Hashable {
        let method: String, route: String, status: Int
    }

    let registry: PrometheusCollectorRegistry
    let inFlight: Gauge
    private let lock = NSLock()
    nonisolated(unsafe) private var series: [Key: Series] = [:]

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        inFlight = registry.makeGauge(descriptor: Self.descriptor("poopypals_http_requests_in_flight", help: "HTTP requests being served now."))
    }

    static func descriptor(_ name: String, help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    static let methods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    /// A request's method as a label: known methods only (a client may send any token as a method, and every
    /// label value is a series).
    static func methodLabel(_ method: HTTPRequest.Method) -> String {
        methods.contains(method.rawValue) ? method.rawValue : "other"
    }

    /// One answered request (`APIMiddleware` counts every request of the API listener when its response is ready
    /// or its error thrown: Hummingbird keeps the hook after the body's last byte to its own package).
    func record(method: String, route: String, status: Int, duration: Duration) {
        let key = Key(method: method, route: route, status: status)
        let found = lock.withLock { series[key] } ?? makeSeries(key)
        found.requests.increment()
        found.duration.record(duration)
        found.errors?.increment()
    }

    private func makeSeries(_ key: Key) -> Series {
        let made = Series(
            requests: registry.makeCounter(descriptor: Self.requests,
                                           labels: [("method", key.method), ("route", key.route), ("status", String(key.status))]),
            duration: registry.makeDurationHistogram(descriptor: Self.duration, labels: [("method", key.method), ("route", key.route)],
                                                     buckets: Self.buckets),
            errors: key.status < 400 ? nil : registry.makeCounter(
                descriptor: Self.errors, labels: [("method", key.method), ("route", key.route), ("class", key.status >= 500 ? "5xx" : "4xx")]))
        lock.withLock { series[key] = made }
        return made
    }
}
