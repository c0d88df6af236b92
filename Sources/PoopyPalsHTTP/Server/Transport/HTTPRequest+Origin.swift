import HTTPTypes
import NIOHTTP1
import NIOHTTPTypesHTTP1

extension HTTPRequest {
    /// `HTTPRequest(head, secure: false, splitCookie: false)` (NIOHTTPTypesHTTP1's conversion), without the
    /// `URLComponents` parse it makes of every target to find a scheme (5 k instructions a request): a target that
    /// begins with "/" (origin form, what clients send) has none, and that conversion keeps it unchanged. Any
    /// other target goes through it.
    /// - Throws: `HTTP1TypeConversionError` for a method HTTP types refuse.
    init(origin head: HTTPRequestHead) throws {
        guard head.uri.utf8.first == UInt8(ascii: "/") else {
            self = try HTTPRequest(head, secure: false, splitCookie: false)
            return
        }
        self.init(method: try Method(head.method), scheme: "http", authority: head.headers.first(name: "Host"),
                  path: head.uri, headerFields: HTTPFields(head.headers, splitCookie: false))
    }
}
