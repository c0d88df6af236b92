import HTTPTypes
import Hummingbird

/// The methods each route template answers, so that a known path with another method is a 405 that says
/// what is allowed (`Allow`), not a 404 that says the path does not exist.
struct RouteTable: Sendable {
    private let routes: [(segments: [Substring], method: HTTPRequest.Method)]

    init(_ router: Router<APIContext>) {
        routes = router.routes.map { route in
            (route.path.description.split(separator: "/"), route.method)
        }
    }

    /// The methods registered for `path` (sorted), empty when no template matches it.
    func methods(for path: String) -> [String] {
        let segments = path.split(separator: "/")
        var found = Set<String>()
        for route in routes where route.segments.count == segments.count {
            let matches = zip(route.segments, segments).allSatisfy { template, actual in
                (template.hasPrefix("{") && template.hasSuffix("}")) || template == actual
            }
            if matches { found.insert(route.method.rawValue) }
        }
        return found.sorted()
    }
}

/// Input the API refuses before any handler runs: a query parameter given more than once (which of two
/// `limit`s would a proxy and we each pick?), and one the route does not take (as unknown body fields are).
struct StrictQueryMiddleware: RouterMiddleware {
    typealias Context = APIContext

    /// The query parameters of each path (`openapi.yaml`); every other path takes none.
    static let parameters: [String: Set<Substring>] = ["/v1/logs": ["limit", "before"], "/v1/sync": ["cursor", "limit"]]

    /// Longer request targets are 414 (the parser refuses beyond `ParserErrorResponder.maxFieldSize`, 431).
    static let maxTargetLength = 8 * 1024

    func handle(_ request: Request, context: APIContext, next: (Request, APIContext) async throws -> Response) async throws -> Response {
        guard request.uri.description.utf8.count <= Self.maxTargetLength else {
            throw APIError(.init(code: 414), "uri_too_long", "the request target is longer than \(Self.maxTargetLength) bytes")
        }
        let allowed = Self.parameters[request.uri.path] ?? []
        var seen = Set<Substring>()
        for (name, _) in request.uri.queryParameters {
            guard seen.insert(name).inserted else {
                throw APIError(.badRequest, "invalid_request", "query parameter \(Self.quoted(name)) is given more than once")
            }
            guard allowed.contains(name) else {
                throw APIError(.badRequest, "invalid_request", "query parameter \(Self.quoted(name)) is not known here")
            }
        }
        return try await next(request, context)
    }

    /// A client-sent name in a message: at most 40 characters of letters, digits and `_-.`.
    static func quoted(_ name: some StringProtocol) -> String {
        let safe = String(name.prefix(40).filter { $0.isASCII && ($0.isLetter || $0.isNumber || "_-.".contains($0)) })
        return "'\(safe)'"
    }
}
