import Foundation
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

    static let requestsName = "poopypals_http_requests_total"
    static let errorsName = "poopypals_http_request_errors_total"
    static let durationName = "poopypals_http_request_duration_seconds"
    static let inFlightName = "poopypals_http_requests_in_flight"

    let registry: PrometheusCollectorRegistry
    let inFlight: Gauge

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        inFlight = registry.makeGauge(descriptor: Self.descriptor(Self.inFlightName, help: "HTTP requests being served now."))
    }

    static func descriptor(_ name: String, help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    /// One answered request. The registry returns the existing series for a name and label set.
    func record(method: String, route: String, status: Int, duration: Duration) {
        let labels = [("method", method), ("route", route), ("status", String(status))]
        registry.makeCounter(descriptor: Self.descriptor(Self.requestsName, help: "HTTP requests answered, by method, route template and status."),
                             labels: labels).increment()
        registry.makeDurationHistogram(
            descriptor: Self.descriptor(Self.durationName, help: "Time from a request's arrival until its response was ready (a streamed export: until it began), in seconds."),
            labels: [("method", method), ("route", route)], buckets: Self.buckets
        ).record(duration)
        if status >= 400 {
            registry.makeCounter(descriptor: Self.descriptor(Self.errorsName, help: "HTTP requests answered with a 4xx or 5xx status, by class."),
                                 labels: [("method", method), ("route", route), ("class", status >= 500 ? "5xx" : "4xx")]).increment()
        }
    }
}

/// Counts every request of the API listener into `RequestMetrics` when its response is ready (or its error
/// thrown): Hummingbird keeps the hook after the body's last byte to its own package. Outside `ErrorMiddleware`, so it sees the status the client gets.
struct RequestMetricsMiddleware: RouterMiddleware {
    typealias Context = APIContext
    static let methods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    let metrics: RequestMetrics

    func handle(_ request: Request, context: APIContext, next: (Request, APIContext) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        // Known methods only: a client may send any token as a method, and every label value is a series.
        let method = Self.methods.contains(request.method.rawValue) ? request.method.rawValue : "other"
        metrics.inFlight.increment()
        do {
            let response = try await next(request, context)
            metrics.record(method: method, route: context.endpointPath ?? "unmatched", status: response.status.code,
                           duration: ContinuousClock.now - start)
            metrics.inFlight.decrement()
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            metrics.record(method: method, route: context.endpointPath ?? "unmatched", status: status, duration: ContinuousClock.now - start)
            metrics.inFlight.decrement()
            throw error
        }
    }
}
