import HTTPTypes
import Hummingbird

/// Input the API refuses before any handler runs: a query parameter given more than once (which of two
/// `limit`s would a proxy and we each pick?), and one the route does not take (as unknown body fields are).
enum StrictQuery {
    /// The query parameters of each path (`openapi.yaml`); every other path takes none.
    static let parameters: [String: Set<Substring>] = ["/v1/logs": ["limit", "before"], "/v1/sync": ["cursor", "limit"]]

    /// Longer request targets are 414 (the parser refuses beyond `ParserErrorResponder.maxFieldSize`, 431).
    static let maxTargetLength = 8 * 1024

    /// - Throws: `APIError` 414 for a target over `maxTargetLength`, 400 for a repeated or unknown parameter.
    static func check(_ request: Request) throws {
        guard request.uri.description.utf8.count <= maxTargetLength else {
            throw APIError(.init(code: 414), "uri_too_long", "the request target is longer than \(maxTargetLength) bytes")
        }
        let allowed = parameters[request.uri.path] ?? []
        var seen = Set<Substring>()
        for (name, _) in request.uri.queryParameters {
            guard seen.insert(name).inserted else {
                throw APIError(.badRequest, "invalid_request", "query parameter \(quoted(name)) is given more than once")
            }
            guard allowed.contains(name) else {
                throw APIError(.badRequest, "invalid_request", "query parameter \(quoted(name)) is not known here")
            }
        }
    }

    /// A client-sent name in a message: at most 40 characters of letters, digits and `_-.`.
    static func quoted(_ name: some StringProtocol) -> String {
        let safe = String(name.prefix(40).filter { $0.isASCII && ($0.isLetter || $0.isNumber || "_-.".contains($0)) })
        return "'\(safe)'"
    }
}
