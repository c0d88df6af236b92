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
