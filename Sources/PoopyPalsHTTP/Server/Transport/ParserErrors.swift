import NIOHTTP1

/// The HTTP/1 parser's limits, and what the API answers when the parser refuses a request: what the parser
/// refuses never reaches the router, and Hummingbird answered it with an empty 400. `APIConnection` answers with
/// the API's JSON error instead — 431 when the request line or headers are too large, 400 for anything else
/// malformed (two Content-Length, Content-Length with Transfer-Encoding, a bad method or header) — and closes the
/// connection, since the rest of the stream cannot be trusted.
enum ParserErrors {
    /// `NIOHTTPDecoderLimitConfiguration`'s limits; the request line counts as one field.
    static let maxFieldSize = 16 * 1024
    static let maxHeaderSize = 32 * 1024
    static let maxFieldCount = 100

    static func answer(for error: HTTPParserError) -> APIError {
        switch error {
        case .headerOverflow:
            return APIError(.init(code: 431), "headers_too_large",
                    "the request line or a header is longer than \(maxFieldSize) bytes, the headers longer than \(maxHeaderSize) bytes, or there are more than \(maxFieldCount) headers")
        case .unexpectedContentLength, .invalidContentLength:
            return APIError(.badRequest, "malformed_request",
                            "the request's length is ambiguous: one Content-Length, or Transfer-Encoding: chunked, not both or two")
        case .invalidMethod:
            return APIError(.badRequest, "malformed_request", "the request method is not a valid HTTP method")
        default:
            return APIError(.badRequest, "malformed_request", "the request is not valid HTTP/1.1")
        }
    }
}
