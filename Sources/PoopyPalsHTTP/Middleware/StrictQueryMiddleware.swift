import HTTPTypes
import Hummingbird

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
