import NIOCore

/// At the front of the pipeline: notes that bytes arrived, so that a timeout can tell a client that started a
/// request from an idle one (`APIConnection`).
final class ByteWatch: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    /// Touched on the channel's event loop only.
    var arrived = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        arrived = true
        context.fireChannelRead(data)
    }
}
