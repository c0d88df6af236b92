import Foundation
import HTTPTypes
import NIOCore
import Values
import NIOHTTP1
import NIOHTTPTypes

/// What the HTTP/1 parser refuses never reaches the router: Hummingbird would answer it with an empty 400. This
/// handler (after the parser, before Hummingbird's request loop) answers with the API's JSON error instead —
/// 431 when the request line or headers are too large, 400 for anything else malformed (two Content-Length,
/// Content-Length with Transfer-Encoding, a bad method or header) — and closes the connection, since the rest of
/// the stream cannot be trusted. A response already under way is finished first: the error follows it. An error
/// in the middle of a request's body (it ends before its Content-Length) goes on to that request instead: its
/// body must fail, never look complete (the route answers 400 `incomplete_body`).
///
/// It also bounds how long a request may take to arrive (`POOPYPALS_REQUEST_TIMEOUT`): its headers, counted
/// from the connection's start or the previous response's end, and then its body, each within the timeout —
/// the idle timeout alone lets a client that sends one byte now and then hold a connection for ever. A client
/// that sent part of a request gets 408 `request_timeout`; an idle keep-alive connection is closed silently.
final class ParserErrorResponder: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// The parser's limits (`HTTP1Channel.Configuration.httpDecoder`); the request line counts as one field.
    static let maxFieldSize = 16 * 1024
    static let maxHeaderSize = 32 * 1024
    static let maxFieldCount = 100

    private let requestTimeout: TimeAmount
    /// At most one scheduled task, firing at or before `deadline`. Arming moves the deadline and leaves a
    /// scheduled task in place (it schedules itself again for the later deadline when it fires): a timer
    /// scheduled and cancelled twice per request cost 5 % of a `/healthz` request's instructions.
    private var timer: Scheduled<Void>?
    /// What expires at `deadline`; nil when nothing does (a request is being answered).
    private var armed: Phase?
    private var deadline = NIODeadline.distantFuture
    /// Bytes arrived since the last response ended (`ByteWatch`, at the front of the pipeline).
    private let watch = ByteWatch()
    /// The current request's response has begun.
    private var responseStarted = false

    init(requestTimeout: TimeAmount) {
        self.requestTimeout = requestTimeout
    }

    /// Requests read whose response has not ended yet.
    private var open = 0
    /// A request's head has arrived but not its end.
    private var readingBody = false
    private var pending: APIError?
    private var answered = false

    func handlerAdded(context: ChannelHandlerContext) {
        try? context.pipeline.syncOperations.addHandler(watch, position: .first)
        if context.channel.isActive { arm(.headers, context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(.headers, context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopTimer()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            open += 1
            readingBody = true
            responseStarted = false
            arm(.body, context: context)
        case .end:
            readingBody = false
            armed = nil
        case .body: break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // After our own answer the connection is closing: nothing else goes out.
        guard !answered else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        let part = unwrapOutboundIn(data)
        context.write(data, promise: promise)
        switch part {
        case .head: responseStarted = true; return
        case .body: return
        case .end: break
        }
        open = max(0, open - 1)
        guard open == 0 else { return }
        if let pending {
            self.pending = nil
            respond(context: context, pending)
        } else if !readingBody {
            watch.arrived = false
            arm(.headers, context: context)
        }
    }

    private enum Phase { case headers, body }

    private func arm(_ phase: Phase, context: ChannelHandlerContext) {
        armed = phase
        deadline = .now() + requestTimeout
        // A scheduled task fires no later than this deadline (the timeout is constant, the clock monotonic).
        if timer == nil { schedule(context: context) }
    }

    private func schedule(context: ChannelHandlerContext) {
        let loop = context.eventLoop.assumeIsolated()
        timer = loop.scheduleTask(deadline: deadline) { [self] in fire(context: context) }
    }

    private func fire(context: ChannelHandlerContext) {
        timer = nil
        guard let phase = armed else { return }
        guard deadline <= .now() else { return schedule(context: context) }
        armed = nil
        expire(phase, context: context)
    }

    private func stopTimer() {
        timer?.cancel()
        timer = nil
        armed = nil
    }

    private func expire(_ phase: Phase, context: ChannelHandlerContext) {
        let seconds = requestTimeout.nanoseconds / 1_000_000_000
        switch phase {
        case .headers:
            guard open == 0 else { return }
            if watch.arrived {
                respond(context: context, APIError(.init(code: 408), "request_timeout", "the request's headers did not arrive within \(seconds) s"))
            } else {
                context.close(promise: nil)  // an idle keep-alive connection: nothing to answer
            }
        case .body:
            guard readingBody else { return }
            if responseStarted {
                context.close(promise: nil)
            } else {
                respond(context: context, APIError(.init(code: 408), "request_timeout", "the request's body did not arrive within \(seconds) s"))
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? HTTPParserError, !readingBody else { return context.fireErrorCaught(error) }
        let answer = Self.answer(for: error)
        if open == 0 { respond(context: context, answer) } else { pending = answer }
    }

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

    private func respond(context: ChannelHandlerContext, _ answer: APIError) {
        guard !answered else { return }
        stopTimer()
        let body = context.channel.allocator.buffer(bytes: answer.body())
        var head = HTTPResponse(status: answer.status)
        head.headerFields[.contentType] = "application/json; charset=utf-8"
        head.headerFields[.contentLength] = String(body.readableBytes)
        head.headerFields[.connection] = "close"
        head.headerFields[.requestID] = UUIDText.lowercase(UUIDText.random())
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        let channel = context.channel
        answered = true  // after our three writes: anything else is refused (see `write`)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// At the front of the pipeline: notes that bytes arrived, so that a timeout can tell a client that started a
/// request from an idle one.
final class ByteWatch: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    /// Touched on the channel's event loop only.
    var arrived = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        arrived = true
        context.fireChannelRead(data)
    }
}
