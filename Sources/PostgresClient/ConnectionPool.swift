import Foundation
import Logging
import Synchronization

/// A bounded pool of connections. Borrow one with `withConnection`; it never escapes the closure.
///
/// Each pooled connection lives on a thread of its own, and the closure runs there, so the closure is
/// synchronous and may block. Waiters are served first come, first served, and give up after
/// `acquireTimeout`. A connection found broken (backend terminated, server restarted) is replaced on the next
/// checkout without a round trip.
public final class ConnectionPool: Sendable {
    public struct Configuration: Sendable {
        public var connection: ConnectionConfiguration
        public var maxConnections: Int
        public var acquireTimeout: Duration

        public init(connection: ConnectionConfiguration, maxConnections: Int = 10, acquireTimeout: Duration = .seconds(10)) {
            precondition(maxConnections > 0, "a pool needs at least one connection")
            self.connection = connection
            self.maxConnections = maxConnections
            self.acquireTimeout = acquireTimeout
        }
    }

    /// A snapshot for metrics.
    public struct Statistics: Sendable, Equatable {
        public var open: Int
        public var inUse: Int
        public var idle: Int
        public var waiting: Int

        public init(open: Int, inUse: Int, idle: Int, waiting: Int) {
            self.open = open
            self.inUse = inUse
            self.idle = idle
            self.waiting = waiting
        }
    }

    public let configuration: Configuration
    private let state = Mutex(State())
    private let logger = Logger(label: "poopypals.postgres.pool")

    private struct Waiter {
        let id: Int
        let continuation: CheckedContinuation<Slot, any Error>
        var timer: Task<Void, Never>?
    }

    private struct State {
        var idle: [Slot] = []
        var slots = 0
        var inUse = 0
        var waiters: [Waiter] = []
        var nextWaiterID = 0
        var closed = false
    }

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    deinit {
        for slot in state.withLock({ $0.idle }) { slot.shutDown {} }
    }

    public var statistics: Statistics {
        state.withLock { Statistics(open: $0.slots, inUse: $0.inUse, idle: $0.idle.count, waiting: $0.waiters.count) }
    }

    /// Borrows a connection for the duration of `body`, which runs on that connection's own thread.
    ///
    /// A transaction left open by `body` is rolled back before the connection is reused.
    /// - Throws: `PostgresClientError` `.poolTimeout`, `.poolClosed` or `.connectionFailed`; `CancellationError`
    ///   when the task is cancelled while waiting; otherwise whatever `body` throws.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let slot = try await acquire()
        let connection = configuration.connection
        do {
            let value = try await slot.thread.run { try slot.use(configuration: connection, body) }
            release(slot)
            return value
        } catch {
            release(slot)
            throw error
        }
    }

    /// Refuses new borrowers, fails the waiting ones, and closes every connection once it is returned.
    public func close() async {
        let (idle, waiters) = state.withLock { state -> ([Slot], [Waiter]) in
            state.closed = true
            defer { state.idle = []; state.waiters = [] }
            state.slots -= state.idle.count
            return (state.idle, state.waiters)
        }
        for waiter in waiters {
            waiter.timer?.cancel()
            waiter.continuation.resume(throwing: PostgresClientError(.poolClosed, "the connection pool is closed"))
        }
        for slot in idle {
            await withCheckedContinuation { done in slot.shutDown { done.resume() } }
        }
    }

    // MARK: - Checkout

    private enum Checkout {
        case ready(Slot)
        case create(Int)
        case wait
        case fail(any Error)
    }

    private func acquire() async throws -> Slot {
        let id = state.withLock { state -> Int in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Slot, any Error>) in
                let checkout = state.withLock { state -> Checkout in
                    if state.closed { return .fail(PostgresClientError(.poolClosed, "the connection pool is closed")) }
                    if Task.isCancelled { return .fail(CancellationError()) }
                    if let slot = state.idle.popLast() {
                        state.inUse += 1
                        return .ready(slot)
                    }
                    if state.slots < configuration.maxConnections {
                        state.slots += 1
                        state.inUse += 1
                        return .create(state.slots)
                    }
                    state.waiters.append(Waiter(id: id, continuation: continuation))
                    return .wait
                }
                switch checkout {
                case .ready(let slot): continuation.resume(returning: slot)
                case .create(let number): continuation.resume(returning: Slot(name: "poopypals-pg-\(number)"))
                case .fail(let error): continuation.resume(throwing: error)
                case .wait: startTimer(for: id)
                }
            }
        } onCancel: {
            fail(waiter: id, with: CancellationError())
        }
    }

    private func startTimer(for id: Int) {
        let timeout = configuration.acquireTimeout
        let timer = Task { [weak self] in
            guard (try? await Task.sleep(for: timeout)) != nil, let self else { return }
            let waiting = statistics
            fail(waiter: id, with: PostgresClientError(.poolTimeout,
                "no database connection became free within \(timeout) (\(waiting.inUse) in use, \(waiting.waiting) waiting)"))
        }
        state.withLock { state in
            if let index = state.waiters.firstIndex(where: { $0.id == id }) { state.waiters[index].timer = timer }
        }
    }

    private func fail(waiter id: Int, with error: any Error) {
        let waiter = state.withLock { state -> Waiter? in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index)
        }
        guard let waiter else { return }
        waiter.timer?.cancel()
        waiter.continuation.resume(throwing: error)
        if error is PostgresClientError { logger.warning("database connection wait timed out") }
    }

    private func release(_ slot: Slot) {
        let next = state.withLock { state -> Waiter? in
            if state.closed {
                state.inUse -= 1
                state.slots -= 1
                return nil
            }
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }  // handed over: still in use
            state.inUse -= 1
            state.idle.append(slot)
            return nil
        }
        if let next {
            next.timer?.cancel()
            next.continuation.resume(returning: slot)
        } else if state.withLock({ $0.closed }) {
            slot.shutDown {}
        }
    }
}

extension ConnectionPool {
    /// One pooled connection and the thread it lives on. `connection` is touched only on `thread`.
    final class Slot: @unchecked Sendable {
        let thread: ConnectionThread
        private var connection: Connection?

        init(name: String) { thread = ConnectionThread(name: name) }

        /// Runs on `thread`: (re)connects when needed, runs `body`, and leaves the connection clean.
        func use<T>(configuration: ConnectionConfiguration, _ body: (Connection) throws -> T) throws -> T {
            if let current = connection, !current.isUsableForCheckout() { connection = nil }
            let connection = try self.connection ?? Connection(configuration: configuration)
            self.connection = connection
            defer {
                if connection.isOpen, connection.transactionState != .idle {
                    _ = try? connection.executeScript("ROLLBACK")
                }
                if !connection.isOpen || connection.transactionState != .idle { self.connection = nil }
            }
            return try body(connection)
        }

        func shutDown(then done: @escaping @Sendable () -> Void) {
            thread.submit { [self] in
                connection = nil
                done()
            }
            thread.stop()
        }
    }
}
