import Foundation

/// Hands chunks from a thread that may block (a database connection's thread) to an async reader (the HTTP
/// response writer), holding at most `capacity` chunks: a slow reader makes the producer wait instead of
/// letting memory grow. Every wait is bounded: the producer gives up after `sendTimeout`, and either side can
/// stop the other (`finish` from the producer, `cancel` from the reader).
final class ChunkChannel: @unchecked Sendable {
    enum Failure: Error { case readerGone, readerTooSlow }

    private let condition = NSCondition()
    private let capacity: Int
    private let sendTimeout: TimeInterval
    private var buffer: [Data] = []
    private var finished = false
    private var failure: (any Error)?
    private var cancelled = false
    private var waiting: CheckedContinuation<Data?, any Error>?

    init(capacity: Int = 4, sendTimeout: Duration = .seconds(30)) {
        self.capacity = max(1, capacity)
        self.sendTimeout = Double(sendTimeout.components.seconds) + Double(sendTimeout.components.attoseconds) / 1e18
    }

    /// Producer: waits while the buffer is full.
    /// - Throws: `Failure.readerGone` once the reader cancelled; `.readerTooSlow` after `sendTimeout`.
    func send(_ chunk: Data) throws {
        condition.lock()
        let deadline = Date(timeIntervalSinceNow: sendTimeout)
        while buffer.count >= capacity && !cancelled {
            if !condition.wait(until: deadline) && buffer.count >= capacity && !cancelled {
                condition.unlock()
                throw Failure.readerTooSlow
            }
        }
        if cancelled {
            condition.unlock()
            throw Failure.readerGone
        }
        if let reader = waiting {
            waiting = nil
            condition.unlock()
            reader.resume(returning: chunk)
            return
        }
        buffer.append(chunk)
        condition.unlock()
    }

    /// Producer: no more chunks; `error` is what the reader's next `next()` throws after the buffered chunks.
    func finish(_ error: (any Error)? = nil) {
        condition.lock()
        guard !finished else {
            condition.unlock()
            return
        }
        finished = true
        failure = error
        let reader = waiting
        waiting = nil
        condition.unlock()
        if let reader {
            if let error { reader.resume(throwing: error) } else { reader.resume(returning: nil) }
        }
    }

    /// Reader: the next chunk, nil at the end.
    /// - Throws: the producer's error, or `CancellationError` when the reading task is cancelled.
    func next() async throws -> Data? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Data?, any Error>) in
                condition.lock()
                if !buffer.isEmpty {
                    let chunk = buffer.removeFirst()
                    condition.signal()
                    condition.unlock()
                    continuation.resume(returning: chunk)
                } else if finished || cancelled {
                    let error = cancelled ? CancellationError() : failure
                    condition.unlock()
                    if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: nil) }
                } else {
                    waiting = continuation
                    condition.unlock()
                }
            }
        } onCancel: {
            cancel()
        }
    }

    /// Reader: stop; a waiting producer and a waiting reader are released.
    func cancel() {
        condition.lock()
        cancelled = true
        let reader = waiting
        waiting = nil
        condition.broadcast()
        condition.unlock()
        reader?.resume(throwing: CancellationError())
    }
}
