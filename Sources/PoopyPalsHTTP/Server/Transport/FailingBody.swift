import NIOCore

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
