import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import Values

/// One API connection, after NIO's HTTP/1 parser: it reads each request whole on the event loop, hands it to
/// `RequestRunner` and writes the response the runner's task gives it (`ResponseStream`), encoded here
/// (`ResponseEncoder`). It used to be five handlers (Hummingbird's HTTP/1 channel and ours); each part of a request
/// or response crossed each of them as a dynamically cast `NIOAny`.
///
/// - One request is answered at a time: what arrives meanwhile (pipelined requests) waits, in order. The socket
///   stays readable while a request is answered until something arrives; then it is not read again until the
///   answer is out, so the queue holds one read's bytes at most. A response that fills the socket's buffer must
///   drain before the next request is taken, within the request timeout, or the connection is closed: a connection
///   holds one unread response at most. (Holding every read while answering took the
///   socket's readiness out of epoll and put it back: two `epoll_ctl` calls a request.)
/// - A body over the size limit is handed over as soon as it is (the route answers 413); the rest is skipped.
/// - A body that fails part way (the stream ended before its Content-Length) is handed over failing (the route
///   answers 400 `incomplete_body`), and the connection is closed after the answer.
/// - What the parser refuses gets the API's JSON error (`ParserErrors`), after the answers to the requests read
///   before it, and the connection is closed: the rest of the stream cannot be trusted.
/// - `POOPYPALS_REQUEST_TIMEOUT` bounds how long a request may take to arrive: its headers, counted from the
///   connection's start or the previous response's end, then its body (`APIConnection+Timeouts.swift`). A client
///   that sent part of a request gets 408 `request_timeout`; an idle keep-alive connection is closed silently,
///   after `POOPYPALS_IDLE_TIMEOUT` at the latest.
/// - A streamed response (the export) waits while the socket's buffer is full, for the request timeout at most.
/// - `Connection: close`, a closed input side, an inbound error or the server's graceful shutdown close the
///   connection once what was read before is answered.
final class APIConnection: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    let requests: RequestRunner
    let requestTimeout: TimeAmount
    let idleTimeout: TimeAmount?
    /// Bytes arrived since the last response ended (`ByteWatch`, in front of the parser).
    let watch: ByteWatch
    var context: ChannelHandlerContext?

    // Reading.
    /// The request being read: its head has arrived, not its end; nil while the rest of a body handed over before
    /// its end (too large) is skipped.
    private var head: HTTPRequest?
    private var body: ByteBuffer?
    /// A head has been read and not yet its end.
    var readingBody = false
    /// Requests read whose responses have not ended.
    var open = 0
    /// Parts read while a request is answered.
    private var queued = CircularBuffer<HTTPRequestPart>()
    private var readHeld = false

    // Answering.
    private var answering = false
    private var encoder = ResponseEncoder(addsDate: true)
    private var method = HTTPRequest.Method.get
    /// The current response's head has gone out.
    var responseStarted = false
    /// The answered request asked for `Connection: close`: nothing after it is answered.
    private var closeAfterAnswer = false
    /// The input side closed or failed: close once what was read before is answered.
    private var closeWhenDone = false
    /// An inbound error that came while a request was answered, for the request read after it.
    private var failure: (any Error)?
    /// The parser's refusal, answered once the requests read before it are.
    var pendingRefusal: APIError?
    /// Graceful shutdown: close once the requests read are answered.
    private var quiescing = false
    /// Nothing more goes out (our own error answer went, or the connection is closing).
    var closing = false

    // Timers (`APIConnection+Timeouts.swift`).
    var requestTimer: Scheduled<Void>?
    var armed: Phase?
    var deadline = NIODeadline.distantFuture
    var idleTimer: Scheduled<Void>?
    var lastActive = NIODeadline.now()

    enum Phase { case headers, body }

    init(requests: RequestRunner, requestTimeout: TimeAmount, idleTimeout: TimeAmount?, watch: ByteWatch) {
        self.requests = requests
        self.requestTimeout = requestTimeout
        self.idleTimeout = idleTimeout
        self.watch = watch
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { becameActive(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTimers()
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        becameActive(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopTimers()
        closing = true
        queued.removeAll()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        lastActive = .now()
        let part: HTTPRequestPart
        switch unwrapInboundIn(data) {
        case .head(let nioHead):
            do {
                part = .head(try HTTPRequest(origin: nioHead))
            } catch {
                return inboundFailed(error, context: context)
            }
            open += 1
            readingBody = true
            responseStarted = false
            arm(.body, context: context)
        case .body(let chunk):
            part = .body(chunk)
        case .end:
            readingBody = false
            armed = nil
            part = .end(nil)
        }
        if closing { return }
        if answering { queued.append(part) } else { take(part, context: context) }
    }

    func read(context: ChannelHandlerContext) {
        if answering && !queued.isEmpty { readHeld = true } else { context.read() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? HTTPParserError, !readingBody {
            let refusal = ParserErrors.answer(for: error)
            if open == 0 { refuse(refusal, context: context) } else { pendingRefusal = refusal }
            return
        }
        inboundFailed(error, context: context)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            if open > 0 { quiescing = true } else { closeNow(context: context) }
            return
        }
        if let event = event as? ChannelEvent, event == .inputClosed {
            closeWhenDone = true
            // A body cut short by the end of the stream fails (the parser usually says so first).
            if !answering { fail(with: ChannelError.eof, context: context) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func inboundFailed(_ error: any Error, context: ChannelHandlerContext) {
        closeWhenDone = true
        if answering {
            if failure == nil { failure = error }
        } else {
            fail(with: error, context: context)
        }
    }

    private func take(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch part {
        case .head(let head):
            self.head = head
            body = nil
        case .body(var chunk):
            guard let head else { return }  // the rest of a body handed over before its end (too large)
            var whole = body ?? chunk
            if body != nil {
                body = nil  // `whole` is then the buffer's only owner: appended to in place
                whole.writeBuffer(&chunk)
            }
            // Over the limit: handed to the router as soon as it is (its collect fails: 413), not read whole.
            if whole.readableBytes > APIContext.maxUploadSize {
                self.head = nil
                hand(head, RequestBody(buffer: whole), context: context)
            } else {
                body = whole
            }
        case .end:
            guard let head else { return }
            self.head = nil
            let whole = body ?? ByteBuffer()
            body = nil
            hand(head, RequestBody(buffer: whole), context: context)
        }
    }

    /// The input failed: a request whose body was being read gets that failure as its body's end; otherwise
    /// there is nothing to answer.
    private func fail(with error: any Error, context: ChannelHandlerContext) {
        guard let head else { return closeNow(context: context) }
        let received = body ?? ByteBuffer()
        self.head = nil
        body = nil
        hand(head, RequestBody(asyncSequence: FailingBody(received: received, error: error)), context: context)
    }

    private func hand(_ head: HTTPRequest, _ body: RequestBody, context: ChannelHandlerContext) {
        answering = true
        watch.arrived = false  // from here on, what arrives is the next request's
        method = head.method
        closeAfterAnswer = head.headerFields.value(of: .connection) == "close"
        requests.start(Request(head: head, body: body), channel: context.channel,
                       connection: NIOLoopBound(self, eventLoop: context.eventLoop))
    }

    // MARK: the response, from `ResponseStream` (on the event loop)

    /// Bodies up to this size go out in the head's buffer: one write instead of two.
    private static let inlineBody = 16 * 1024

    func write(head: HTTPResponse?, held: ByteBuffer?, chunk: ByteBuffer, drained: EventLoopPromise<Void>) {
        guard let context, !closing else { return drained.fail(ChannelError.ioOnClosedChannel) }
        if let head { writeHead(head, context: context) }
        if let held { writeBody(held, context: context) }
        writeBody(chunk, context: context)
        // An empty write: its future is the flush's, whether or not the encoder wrote anything above.
        let written = context.writeAndFlush(wrapOutboundOut(.byteBuffer(ByteBuffer())))
        if context.channel.isWritable { return drained.succeed() }
        // The socket's buffer is full: the writer waits until this chunk (and all before it) is out, and a client
        // that stopped reading holds the export (and its database connection) no longer than the request timeout.
        written.cascade(to: drained)
        let stalled = context.eventLoop.assumeIsolated().scheduleTask(in: requestTimeout) { [self] in closeNow(context: context) }
        written.whenComplete { _ in stalled.cancel() }
    }

    func finish(head: HTTPResponse?, held: ByteBuffer?, trailers: HTTPFields?) {
        guard let context, !closing else { return }
        if let head {
            var buffer = context.channel.allocator.buffer(capacity: 256 + (held?.readableBytes ?? 0))
            encoder.writeHead(head, answering: method, into: &buffer)
            responseStarted = true
            if var held, !encoder.chunked, !encoder.bodySuppressed, held.readableBytes <= Self.inlineBody {
                buffer.writeBuffer(&held)
            } else if let held {
                context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: nil)
                buffer = ByteBuffer()
                writeBody(held, context: context)
            }
            if let end = encoder.end(trailers, allocator: context.channel.allocator) {
                context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: nil)
                buffer = end
            }
            responseEnded(context.writeAndFlush(wrapOutboundOut(.byteBuffer(buffer))), context: context)
        } else {
            if let held { writeBody(held, context: context) }
            let end = encoder.end(trailers, allocator: context.channel.allocator) ?? ByteBuffer()
            responseEnded(context.writeAndFlush(wrapOutboundOut(.byteBuffer(end))), context: context)
        }
    }

    /// The response's body failed part way: the client must not take what it got for the whole.
    func abort() {
        guard let context else { return }
        closeNow(context: context)
    }

    private func writeHead(_ head: HTTPResponse, context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: 256)
        encoder.writeHead(head, answering: method, into: &buffer)
        responseStarted = true
        context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: nil)
    }

    private func writeBody(_ chunk: ByteBuffer, context: ChannelHandlerContext) {
        encoder.writeBody(chunk, allocator: context.channel.allocator) { context.write(wrapOutboundOut(.byteBuffer($0)), promise: nil) }
    }

    /// After a response's last bytes are handed to the channel. When the socket's buffer is full (a client that
    /// does not read), the next request is not taken until this response has drained: a client pipelining requests
    /// it never reads would otherwise have every answer built and held in memory, one after the other (200 such
    /// connections grew the process past 1 GiB). A response that does not drain within the request timeout ends the
    /// connection, as a stalled streamed one does.
    private func responseEnded(_ written: EventLoopFuture<Void>, context: ChannelHandlerContext) {
        if context.channel.isWritable { return nextAfterResponse(written, context: context) }
        let loop = context.eventLoop.assumeIsolated()
        let stalled = loop.scheduleTask(in: requestTimeout) { [self] in closeNow(context: context) }
        written.hop(to: context.eventLoop).assumeIsolated().whenComplete { [self] result in
            stalled.cancel()
            guard case .success = result, !closing else { return }
            nextAfterResponse(written, context: context)
        }
    }

    /// The response is out (or small enough to leave to the socket): the next request, or the connection's end.
    private func nextAfterResponse(_ written: EventLoopFuture<Void>, context: ChannelHandlerContext) {
        answering = false
        open = max(0, open - 1)
        if open == 0 {
            if quiescing { return close(after: written, context: context) }
            if let refusal = pendingRefusal {
                pendingRefusal = nil
                return refuse(refusal, context: context)
            }
            requestsAnswered(context: context)
        }
        if closeAfterAnswer { return close(after: written, context: context) }
        while !answering, let part = queued.popFirst() { take(part, context: context) }
        guard !answering else { return }
        if let failure {
            self.failure = nil
            fail(with: failure, context: context)
            if answering { return }
        }
        if closeWhenDone { return close(after: written, context: context) }
        if readHeld {
            readHeld = false
            context.read()
        }
    }

    private func close(after written: EventLoopFuture<Void>, context: ChannelHandlerContext) {
        closing = true
        queued.removeAll()
        written.whenComplete { _ in context.close(promise: nil) }
    }

    func closeNow(context: ChannelHandlerContext) {
        closing = true
        queued.removeAll()
        context.close(promise: nil)
    }

    /// Our own answer to what never reached the router (`ParserErrors`, a timeout), then the connection's end.
    func refuse(_ answer: APIError, context: ChannelHandlerContext) {
        guard !closing else { return }
        stopTimers()
        closing = true
        let body = answer.body()
        var head = HTTPResponse(status: answer.status)
        head.headerFields[.contentType] = JSONResponse.contentType
        head.headerFields[.contentLength] = String(body.count)
        head.headerFields[.connection] = "close"
        head.headerFields[.requestID] = UUIDText.lowercase(UUIDText.random())
        var buffer = context.channel.allocator.buffer(capacity: 256 + body.count)
        var encoder = ResponseEncoder(addsDate: true)
        encoder.writeHead(head, answering: .get, into: &buffer)
        buffer.writeBytes(body)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.byteBuffer(buffer))).whenComplete { _ in channel.close(promise: nil) }
    }
}
