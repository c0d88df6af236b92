import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1

/// The API listener's connections: NIO's HTTP/1 codec, the API's own parser-error and timeout handling
/// (`ParserErrorResponder`), Hummingbird's idle and quiesce handling (`HTTPConnectionStateHandler`), and then
/// `RequestHandler`, which hands each whole request to the router on the request pool's threads and writes the
/// response from there.
///
/// Hummingbird's `HTTP1Channel` reads and writes through `NIOAsyncChannel` instead: its inbound stream and
/// outbound writer, their state machines and the generic metadata they look up at run time cost about a third of
/// a `/healthz` request's instructions. `Application` still owns the listener, the services and graceful
/// shutdown; the responder closure it hands `HTTPServerBuilder` is not used (it writes through that writer).
struct APIChildChannel: ServerChildChannel {
    struct Value: ServerChildChannelValue {
        let channel: any Channel
    }

    let requests: RequestRunner
    let requestTimeout: TimeAmount
    let idleTimeout: Duration?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            var limits = NIOHTTPDecoderLimitConfiguration()
            limits.maxHeaderFieldSize = ParserErrorResponder.maxFieldSize
            limits.maxHeaderListSize = ParserErrorResponder.maxHeaderSize
            limits.maxHeaderFieldCount = ParserErrorResponder.maxFieldCount
            let pipeline = channel.pipeline.syncOperations
            try pipeline.configureHTTPServerPipeline(withPipeliningAssistance: false, withErrorHandling: false,
                                                     withOutboundHeaderValidation: false, withEncoderConfiguration: .init(),
                                                     withDecoderLimitConfiguration: limits)
            try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try pipeline.addHandler(ParserErrorResponder(requestTimeout: requestTimeout))
            try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: idleTimeout, logger: logger))
            try pipeline.addHandler(RequestHandler(requests: requests))
            return Value(channel: channel)
        }
    }

    /// Lasts as long as the connection: the server counts its connections by these calls (graceful shutdown
    /// waits for them). Cancelled, it closes the connection.
    func handle(value: Value, logger: Logger) async {
        let channel = value.channel
        await withTaskCancellationHandler {
            try? await channel.closeFuture.get()
        } onCancel: {
            channel.close(promise: nil)
        }
    }
}
