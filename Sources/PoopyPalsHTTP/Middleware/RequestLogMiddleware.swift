import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PoopyPalsData
import Values

/// Outermost: gives every request an id (the client's when it is sane), returns it in `X-Request-ID`, and
/// logs one line per request with the id, route template, status and duration — never a path with ids in
/// it, a header value or a body.
struct RequestLogMiddleware: RouterMiddleware {
    typealias Context = APIContext
    let logger: Logger
    /// With a read pool: a request's writes record where their commits reached, returned in `Consistency-Token`.
    var tokensCommits = false

    func handle(_ request: Request, context: APIContext, next: (Request, APIContext) async throws -> Response) async throws -> Response {
        var context = context
        let id = Self.sane(request.headers[.requestID]) ?? UUIDText.lowercase(UUIDText.random())
        // Handlers' log lines name it themselves: setting it on the context's logger re-rendered the logger's
        // metadata on every request (3 % of the server's CPU listing logs).
        context.requestID = id
        let started = ContinuousClock.now
        var response: Response
        do {
            // Data-layer log lines of this request carry its id too.
            if tokensCommits {
                let commits = CommitRecorder()
                response = try await RequestTrace.$id.withValue(id) {
                    try await RequestTrace.$commits.withValue(commits) { try await next(request, context) }
                }
                if let token = commits.token, response.status.code < 300 { response.headers[.consistencyToken] = token.encoded }
            } else {
                response = try await RequestTrace.$id.withValue(id) { try await next(request, context) }
            }
        } catch {
            // The error middleware maps everything; this is a last resort that still answers in our format.
            response = try APIError.internalError.response(from: request, context: context)
        }
        response.headers[.requestID] = id
        let elapsed = ContinuousClock.now - started
        // A probe answered 200 is routine (every few seconds from an orchestrator): debug. Everything else, a 4xx
        // or 5xx included, is one info line; a failure's cause is the one line its handler or ErrorMiddleware wrote.
        let routine = response.status == .ok && (context.endpointPath == "/healthz" || context.endpointPath == "/readyz")
        logger.log(level: routine ? .debug : .info, "request", metadata: [
            "request_id": "\(id)", "method": "\(request.method)", "route": "\(context.endpointPath ?? "unmatched")",
            "status": "\(response.status.code)",
            "duration_ms": "\(Self.milliseconds(elapsed))",
        ])
        return response
    }

    /// `1.25`: milliseconds with two decimals, rounded half up (`String(format:)` cost 3 % of a request's CPU).
    static func milliseconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        // A clock's difference: never negative, nor millions of years (both answered without arithmetic).
        guard seconds >= 0, attoseconds >= 0 else { return "0.00" }
        guard seconds < 1_000_000_000 else { return "\(seconds)000.00" }
        let hundredths = seconds * 100_000 + (attoseconds + 5_000_000_000_000) / 10_000_000_000_000
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
    }

    /// 1–128 characters of letters, digits and `-_.:`; anything else is replaced by a fresh id.
    static func sane(_ value: String?) -> String? {
        guard let value, (1...128).contains(value.count),
              value.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-_.:".unicodeScalars.contains($0)) })
        else { return nil }
        return value
    }
}
