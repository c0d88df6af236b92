import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import NIOHTTPTypes

/// One response on its way out, written from the request's task. A body given whole (the usual case) goes out
/// with its head and end in one hop to the event loop and one flush; a streamed body (the export) is written
/// chunk by chunk, and a chunk written while the socket's buffer is full waits until it has drained.
///
/// Used by one task at a time (the request's), in order: not shared, hence unchecked.
final class ResponseStream: @unchecked Sendable {
    private let head: HTTPResponse
    private let channel: any Channel
    private let connection: NIOLoopBound<APIConnection>
    private var headSent = false
    /// The first chunk, held back in case it is the only one.
    private var held: ByteBuffer?
    private var finished = false

    init(head: HTTPResponse, channel: any Channel, connection: NIOLoopBound<APIConnection>) {
        self.head = head
        self.channel = channel
        self.connection = connection
    }

    struct Writer: ResponseBodyWriter {
        let stream: ResponseStream

        mutating func write(_ buffer: ByteBuffer) async throws {
            try await stream.write(buffer)
        }

        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
            stream.finish(trailingHeaders)
        }
    }

    private func write(_ buffer: ByteBuffer) async throws {
        guard !finished else { throw ChannelError.ioOnClosedChannel }
        if !headSent && held == nil {
            held = buffer
            return
        }
        let (head, held) = takeHeadAndHeld()
        let drained = channel.eventLoop.makePromise(of: Void.self)
        let connection = connection
        channel.eventLoop.execute { connection.value.write(head: head, held: held, chunk: buffer, drained: drained) }
        try await drained.futureResult.get()
    }

    /// Ends the response (once; a body that returns without finishing is finished by `RequestRunner`).
    func finish(_ trailers: HTTPFields?) {
        guard !finished else { return }
        finished = true
        let (head, held) = takeHeadAndHeld()
        let connection = connection
        channel.eventLoop.execute { connection.value.finish(head: head, held: held, trailers: trailers) }
    }

    /// The body failed after its head may have gone out: the connection is closed, so the client sees a cut,
    /// not a complete response.
    func abort() {
        guard !finished else { return }
        finished = true
        let connection = connection
        channel.eventLoop.execute { connection.value.abort() }
    }

    private func takeHeadAndHeld() -> (HTTPResponse?, ByteBuffer?) {
        let first = headSent ? nil : head
        headSent = true
        defer { held = nil }
        return (first, held)
    }
}
