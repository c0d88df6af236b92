import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PoopyPalsData
import Values

/// The API listener's one middleware. From the outside in, for every request:
/// 1. a request id (the client's when it is sane), returned in `X-Request-ID`, and one log line per request with
///    the id, route template, status and duration — never a path with ids in it, a header value or a body;
/// 2. the request metrics (`RequestMetrics`), counted from the status the client gets;
/// 3. every error turned into the API's JSON error (`ErrorMiddleware.answer`);
/// 4. the strict query check (`StrictQuery`);
/// 5. `X-Device-ID` resolved once (parse, then the SHA-256 key derivation) into the context: a handler asks
///    `context.device()`, which throws the 401 when there is none. A bad header is not refused here: a route that
///    needs no device (`/healthz`) answers anyway.
///
/// One async frame, not five middlewares: each of Hummingbird's middleware layers costs a responder, closures and
/// four executor switches per request (four layers fewer: 16 k of a `/healthz` request's 193 k instructions).
struct APIMiddleware: RouterMiddleware {
    typealias Context = APIContext
    let logger: Logger
    /// With a read pool: a request's writes record where their commits reached, returned in `Consistency-Token`.
    var tokensCommits = false
    let metrics: RequestMetrics
    let errors: ErrorMiddleware
    /// This release against the database's schema (`SchemaGate`): a `/v1/` request is refused 503 before it reaches
    /// the database while the release cannot serve it.
    var schema: SchemaGate? = nil

    // `@concurrent`, as Hummingbird's requirement is (this module's async functions are nonsending: Package.swift).
    @concurrent func handle(_ request: Request, context: APIContext, next: @concurrent (Request, APIContext) async throws -> Response) async throws -> Response {
        var context = context
        let id = Self.sane(request.headers.value(of: .requestID)) ?? UUIDText.lowercase(UUIDText.random())
        // Handlers' log lines name it themselves: setting it on the context's logger re-rendered the logger's
        // metadata on every request (3 % of the server's CPU listing logs).
        context.requestID = id
        if let header = request.headers.value(of: .deviceID) {
            context.resolvedDevice = Result { () throws(AuthenticationError) in try DeviceID(validating: header) }
        }
        let started = ContinuousClock.now
        // Known methods only: a client may send any token as a method, and every label value is a series.
        let method = RequestMetrics.methodLabel(request.method)
        metrics.inFlight.increment()
        var response: Response
        do {
            // Data-layer log lines of this request carry its id too.
            if tokensCommits {
                let commits = CommitRecorder()
                response = try await RequestTrace.$id.withValue(id) {
                    try await RequestTrace.$commits.withValue(commits) { try await answer(request, context, next) }
                }
                if let token = commits.token, response.status.code < 300 { response.headers[.consistencyToken] = token.encoded }
            } else {
                response = try await RequestTrace.$id.withValue(id) { try await answer(request, context, next) }
            }
            metrics.record(method: method, route: context.endpointPath ?? "unmatched", status: response.status.code,
                           duration: ContinuousClock.now - started)
        } catch {
            // Only if an error response could not be made: a last resort that still answers in our format.
            metrics.record(method: method, route: context.endpointPath ?? "unmatched",
                           status: (error as? any HTTPResponseError)?.status.code ?? 500, duration: ContinuousClock.now - started)
            response = try APIError.internalError.response(from: request, context: context)
        }
        metrics.inFlight.decrement()
        response.headers[.requestID] = id
        let elapsed = ContinuousClock.now - started
        // A probe answered 200 is routine (every few seconds from an orchestrator): debug. Everything else, a 4xx
        // or 5xx included, is one info line; a failure's cause is the one line its handler or `errors` wrote.
        let routine = response.status == .ok && (context.endpointPath == "/healthz" || context.endpointPath == "/readyz")
        logger.log(level: routine ? .debug : .info, "request", metadata: [
            "request_id": "\(id)", "method": "\(request.method)", "route": "\(context.endpointPath ?? "unmatched")",
            "status": "\(response.status.code)",
            "duration_ms": "\(Self.milliseconds(elapsed))",
        ])
        return response
    }

    /// The handler's response, or the API's error for what it (or the query check) threw.
    private func answer(_ request: Request, _ context: APIContext, _ next: (Request, APIContext) async throws -> Response) async throws -> Response {
        do {
            if let schema, let refusal = schema.refusal(), request.uri.path.hasPrefix("/v1/") { throw refusal }
            try StrictQuery.check(request)
            return try await next(request, context)
        } catch {
            // An error a changed schema causes (a function, grant or column gone) is asked about at once: a release
            // the database no longer supports answers 503 with Retry-After, never 500.
            if let schema, SchemaCompatibility.mayFollowASchemaChange(error), let verdict = await schema.check(),
               let refusal = SchemaGate.refusal(verdict) {
                return try errors.answer(refusal, to: request, context: context)
            }
            return try errors.answer(error, to: request, context: context)
        }
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
