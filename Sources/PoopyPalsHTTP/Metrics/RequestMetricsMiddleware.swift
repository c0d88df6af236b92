import Foundation
import Hummingbird
import Prometheus

/// Counts every request of the API listener into `RequestMetrics` when its response is ready (or its error
/// thrown): Hummingbird keeps the hook after the body's last byte to its own package. Outside `ErrorMiddleware`,
/// so it sees the status the client gets.
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
