import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1

/// The API listener's connections: NIO's HTTP/1 parser, then `APIConnection`, which does the rest (reads each
/// request whole, hands it to the router on the request pool's threads, encodes the response, times requests
/// out, closes idle connections and drains on graceful shutdown).
///
/// Hummingbird's `HTTP1Channel` reads and writes through `NIOAsyncChannel` instead, behind four more handlers: the
/// async channel's stream and writer, their state machines, the generic metadata they look up at run time and a
/// dynamically cast `NIOAny` per part and handler cost about a third of a `/healthz` request's instructions.
/// `Application` still owns the listener, the services and graceful shutdown; the responder closure it hands
/// `HTTPServerBuilder` is not used (it writes through that writer).
struct APIChildChannel: ServerChildChannel {
    struct Value: ServerChildChannelValue {
        let channel: any Channel
    }

    let requests: RequestRunner
    let requestTimeout: TimeAmount
    let idleTimeout: TimeAmount?
    /// Nil: no limit per address.
    var perAddress: ConnectionsPerAddress?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            if let perAddress, !perAddress.admit(channel) {
                logger.debug("connection refused: its address has as many open as it may", metadata: ["limit": "\(perAddress.limit)"])
                channel.close(promise: nil)
                return Value(channel: channel)
            }
            var limits = NIOHTTPDecoderLimitConfiguration()
            limits.maxHeaderFieldSize = ParserErrors.maxFieldSize
            limits.maxHeaderListSize = ParserErrors.maxHeaderSize
            limits.maxHeaderFieldCount = ParserErrors.maxFieldCount
            let watch = ByteWatch()
            try channel.pipeline.syncOperations.addHandlers([
                watch,
                ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes, limitConfiguration: limits)),
                APIConnection(requests: requests, requestTimeout: requestTimeout, idleTimeout: idleTimeout, watch: watch),
            ])
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
