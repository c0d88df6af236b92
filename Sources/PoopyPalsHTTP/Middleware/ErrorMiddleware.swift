import Foundation
import HTTPTypes
import Hummingbird
import Metrics
import Logging
import PoopyPalsData
import Values

/// Turns every error into the API's JSON error with the right status; unexpected ones are logged (with the
/// request id, and only the error's safe description) and answered with a generic 500. The metrics listener uses
/// it as a middleware; the API listener calls `answer` from `APIMiddleware`.
struct ErrorMiddleware: RouterMiddleware {
    typealias Context = APIContext
    /// When given, a path that exists with other methods is a 405 naming them (`Allow`), not a 404.
    let routes: RouteTable?

    // `@concurrent`, as Hummingbird's requirement is (this module's async functions are nonsending: Package.swift).
    @concurrent func handle(_ request: Request, context: APIContext, next: @concurrent (Request, APIContext) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            return try answer(error, to: request, context: context)
        }
    }

    /// The codes of the limits that refuse a client (`poopypals_http_refusals_total{code}`).
    static let refusals: Set<String> = ["rate_limited", "device_busy", "export_busy", "quota_exceeded", "busy"]

    /// The response for an error a handler (or a check before it) threw.
    func answer(_ error: any Error, to request: Request, context: APIContext) throws -> Response {
        if let error = error as? HTTPError, error.status == .notFound, (context.endpointPath ?? "NotFound") == "NotFound" {
            // No route matched (Hummingbird's not-found responder names the endpoint "NotFound").
            guard let allowed = routes?.methods(for: request.uri.path), !allowed.isEmpty else {
                return try APIError.from(error).response(from: request, context: context)
            }
            var apiError = APIError(.methodNotAllowed, "method_not_allowed", "this route allows \(allowed.joined(separator: ", ")) only")
            apiError.headers[.allow] = allowed.joined(separator: ", ")
            return try apiError.response(from: request, context: context)
        }
        let apiError = APIError.from(error)
        if Self.refusals.contains(apiError.code) {
            // Limits that refused a client, by reason: a bounded set of labels.
            Counter(label: "poopypals_http_refusals_total", dimensions: [("code", apiError.code)]).increment()
        }
        if apiError.status == .internalServerError {
            context.logger.error("request failed", metadata: ["request_id": "\(context.requestID)", "error": "\(error)"])
        } else if apiError.status == .serviceUnavailable, !(error is APIError) {
            // An APIError was thrown by a handler that logged its cause already (readiness): no second line.
            context.logger.warning("service unavailable", metadata: [
                "request_id": "\(context.requestID)", "code": "\(apiError.code)", "error": "\(error)",
            ])
        } else if apiError.status.code < 500 {
            // Expected: the client's mistake or a conflict, answered with its code.
            context.logger.debug("client error", metadata: [
                "request_id": "\(context.requestID)", "status": "\(apiError.status.code)", "code": "\(apiError.code)",
            ])
        }
        return try apiError.response(from: request, context: context)
    }
}
