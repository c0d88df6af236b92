import Hummingbird
import PoopyPalsData

/// Resolves `X-Device-ID` once per request (parse, then the SHA-256 key derivation) into the request context;
/// a handler asks `context.device()`, which throws the 401 when there is none. Never throws itself: a route that
/// needs no device (`/healthz`) is not refused for a bad header.
struct DeviceMiddleware: RouterMiddleware {
    typealias Context = APIContext

    func handle(_ request: Request, context: APIContext, next: (Request, APIContext) async throws -> Response) async throws -> Response {
        var context = context
        if let header = request.headers[.deviceID] {
            context.resolvedDevice = Result { () throws(AuthenticationError) in try DeviceID(validating: header) }
        }
        return try await next(request, context)
    }
}
