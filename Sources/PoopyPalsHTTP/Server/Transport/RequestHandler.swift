import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import NIOHTTPTypes

/// The last handler of an API connection. It reads a request whole (head and body) on the event loop, hands it
/// to `RequestRunner`, and writes the response the runner's task gives it (`ResponseStream`). One request is
/// answered at a time: what arrives meanwhile (pipelined requests) waits here, in order, and the socket is not
/// read until the answer is out, so a client cannot make the queue grow.
///
/// - A body over the size limit is handed over as soon as it is (the route answers 413); the rest of it is
///   skipped, not buffered.
/// - A body that fails part way (the client ended the stream before its Content-Length) is handed over failing
///   (the route answers 400 `incomplete_body`), and the connection is closed after the answer.
/// - `Connection: close`, a closed input side or an inbound error close the connection once what was read before
///   it is answered.
final class RequestHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let requests: RequestRunner
    private var context: ChannelHandlerContext?
    /// The request being read: its head has arrived, not its end.
    private var head: HTTPRequest?
    private var body: ByteBuffer?
    /// A request is being answered; what arrives meanwhile waits in `queued`, and reads are held.
    private var answering = false
    private var queued = CircularBuffer<HTTPRequestPart>()
    private var readHeld = false
    /// The answered request asked for `Connection: close`: nothing after it is answered.
    private var closeAfterAnswer = false
    /// The input side closed or failed: close once what was read before is answered.
    private var closeWhenDone = false
    /// An inbound error that came while a request was being answered, for the request read after it.
    private var failure: (any Error)?
    private var closing = false

    init(requests: RequestRunner) {
        self.requests = requests
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if answering || closing {
            if !closing { queued.append(part) }
        } else {
            take(part, context: context)
        }
    }

    func read(context: ChannelHandlerContext) {
        if answering { readHeld = true } else { context.read() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        closeWhenDone = true
        if answering {
            if failure == nil { failure = error }
        } else {
            fail(with: error, context: context)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            closeWhenDone = true
            // A body cut short by the end of the stream fails (the parser usually says so first).
            if !answering { fail(with: ChannelError.eof, context: context) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        closing = true
        queued.removeAll()
        context.fireChannelInactive()
    }

    private func take(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch part {
        case .head(let head):
            self.head = head
            body = nil
        case .body(var chunk):
            guard let head else { return }  // none: the rest of a body handed over before its end (too large)
            var whole = body ?? chunk
            if body != nil {
                body = nil  // `whole` is then the buffer's only owner: appended to in place
                whole.writeBuffer(&chunk)
            }
            if whole.readableBytes > requests.maxBodySize {
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
        closeAfterAnswer = head.headerFields.value(of: .connection) == "close"
        requests.start(Request(head: head, body: body), channel: context.channel,
                       handler: NIOLoopBound(self, eventLoop: context.eventLoop))
    }

    // MARK: the response, from `ResponseStream` (on the event loop)

    func write(head: HTTPResponse?, held: ByteBuffer?, chunk: ByteBuffer, drained: EventLoopPromise<Void>) {
        guard let context, !closing else { return drained.fail(ChannelError.ioOnClosedChannel) }
        if let head { context.write(wrapOutboundOut(.head(head)), promise: nil) }
        if let held { context.write(wrapOutboundOut(.body(held)), promise: nil) }
        let written = context.writeAndFlush(wrapOutboundOut(.body(chunk)))
        // The socket's buffer is full: the writer waits until this chunk (and all before it) is out.
        if context.channel.isWritable { drained.succeed() } else { written.cascade(to: drained) }
    }

    func finish(head: HTTPResponse?, held: ByteBuffer?, trailers: HTTPFields?) {
        guard let context, !closing else { return }
        if let head { context.write(wrapOutboundOut(.head(head)), promise: nil) }
        if let held { context.write(wrapOutboundOut(.body(held)), promise: nil) }
        let written = context.writeAndFlush(wrapOutboundOut(.end(trailers)))
        answering = false
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

    /// The response's body failed part way: the client must not take what it got for the whole.
    func abort() {
        guard let context else { return }
        closeNow(context: context)
    }

    private func close(after written: EventLoopFuture<Void>, context: ChannelHandlerContext) {
        closing = true
        queued.removeAll()
        written.whenComplete { _ in context.close(promise: nil) }
    }

    private func closeNow(context: ChannelHandlerContext) {
        closing = true
        queued.removeAll()
        context.close(promise: nil)
    }
}

/// A request body that ended in an error: what arrived, then the error.
struct FailingBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let received: ByteBuffer
    let error: any Error

    struct AsyncIterator: AsyncIteratorProtocol {
        var received: ByteBuffer?
        let error: any Error

        mutating func next() async throws -> ByteBuffer? {
            if let chunk = received, chunk.readableBytes > 0 {
                received = nil
                return chunk
            }
            throw error
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(received: received, error: error)
    }
}
