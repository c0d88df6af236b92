import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

/// What the HTTP/1 parser refuses never reaches the router: Hummingbird would answer it with an empty 400. This
/// handler (after the parser, before Hummingbird's request loop) answers with the API's JSON error instead —
/// 431 when the request line or headers are too large, 400 for anything else malformed (two Content-Length,
/// Content-Length with Transfer-Encoding, a bad method or header) — and closes the connection, since the rest of
/// the stream cannot be trusted. A response already under way is finished first: the error follows it. An error
/// in the middle of a request's body (it ends before its Content-Length) goes on to that request instead: its
/// body must fail, never look complete (the route answers 400 `incomplete_body`).
final class ParserErrorResponder: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// The parser's limits (`HTTP1Channel.Configuration.httpDecoder`); the request line counts as one field.
    static let maxFieldSize = 16 * 1024
    static let maxHeaderSize = 32 * 1024
    static let maxFieldCount = 100

    /// Requests read whose response has not ended yet.
    private var open = 0
    /// A request's head has arrived but not its end.
    private var readingBody = false
    private var pending: (status: HTTPResponse.Status, code: String, message: String)?
    private var answered = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head: open += 1; readingBody = true
        case .end: readingBody = false
        case .body: break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let isEnd = if case .end = unwrapOutboundIn(data) { true } else { false }
        context.write(data, promise: promise)
        guard isEnd else { return }
        open = max(0, open - 1)
        if open == 0, let pending {
            self.pending = nil
            respond(context: context, pending)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? HTTPParserError, !readingBody else { return context.fireErrorCaught(error) }
        let answer = Self.answer(for: error)
        if open == 0 { respond(context: context, answer) } else { pending = answer }
    }

    static func answer(for error: HTTPParserError) -> (status: HTTPResponse.Status, code: String, message: String) {
        switch error {
        case .headerOverflow:
            return (.init(code: 431), "headers_too_large",
                    "the request line or a header is longer than \(maxFieldSize) bytes, the headers longer than \(maxHeaderSize) bytes, or there are more than \(maxFieldCount) headers")
        case .unexpectedContentLength, .invalidContentLength:
            return (.badRequest, "malformed_request",
                    "the request's length is ambiguous: one Content-Length, or Transfer-Encoding: chunked, not both or two")
        case .invalidMethod:
            return (.badRequest, "malformed_request", "the request method is not a valid HTTP method")
        default:
            return (.badRequest, "malformed_request", "the request is not valid HTTP/1.1")
        }
    }

    private func respond(context: ChannelHandlerContext,
                         _ answer: (status: HTTPResponse.Status, code: String, message: String)) {
        guard !answered else { return }
        answered = true
        let json = (try? JSONEncoder().encode(["error": ["code": answer.code, "message": answer.message]])) ?? Data()
        let body = context.channel.allocator.buffer(bytes: json)
        var head = HTTPResponse(status: answer.status)
        head.headerFields[.contentType] = "application/json; charset=utf-8"
        head.headerFields[.contentLength] = String(body.readableBytes)
        head.headerFields[.connection] = "close"
        head.headerFields[.requestID] = UUID().uuidString.lowercased()
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}
