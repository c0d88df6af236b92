import Foundation
import Logging
import Synchronization

/// A bounded pool of connections. Borrow one with `withConnection`; it never escapes the closure.
///
/// The closure runs on one of the pool's own threads, so it is synchronous and may block. A task that already
/// runs on those threads (`taskExecutor()`) runs the closure right there, without handing it to another thread
/// and back; any other task hands it to one of them and is resumed with the result.
/// Waiters are served first come, first served, and give up after `acquireTimeout`. A connection found broken (backend terminated, server restarted) is replaced on the next
/// checkout without a round trip.
public final class ConnectionPool: Sendable {
    public struct Configuration: Sendable {
        public var connection: ConnectionConfiguration
        public var maxConnections: Int
        public var acquireTimeout: Duration
        /// A connection older than this is closed and replaced when it is next borrowed (server-side memory
        /// growth, a rotated password, a failover all reach long-lived connections this way).
        public var maxConnectionLifetime: Duration

        /// `maxConnections` below 1 is taken as 1.
        public init(connection: ConnectionConfiguration, maxConnections: Int = 10, acquireTimeout: Duration = .seconds(10),
                    maxConnectionLifetime: Duration = .seconds(1800)) {
            self.connection = connection
            self.maxConnections = max(1, maxConnections)
            self.acquireTimeout = acquireTimeout
            self.maxConnectionLifetime = maxConnectionLifetime
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
    private let state = LockedState(State())
    private let logger = Logger(label: "poopypals.postgres.pool")

    /// A borrower waiting for a connection. Its body is handed over with it: when a connection is returned, the
    /// next waiter's body is queued on the pool's threads right away, so that no connection sits idle
    /// until the waiting task is scheduled again (on a saturated cooperative pool that took long enough for
    /// other waiters to time out).
    private struct Waiter {
        let id: Int
        /// Called under the pool's lock when a slot is lent to this waiter (so that a cancel finds it).
        let assign: @Sendable (Slot) -> Void
        /// Runs the body on the pool's threads; the slot is already lent.
        let start: @Sendable (Slot) -> Void
        let fail: @Sendable (any Error) -> Void
        /// When the wait gives up (`acquireTimeout` after it began).
        let deadline: ContinuousClock.Instant
    }

    private struct State {
        var idle: [Slot] = []
        /// Slots lent out, so that shutdown can cancel what they run.
        var lent: [ObjectIdentifier: Slot] = [:]
        var slots = 0
        var waiters: [Waiter] = []
        /// The one task that fails waiters whose deadline has passed (`watchWaiters`); nil when none is needed.
        var waitWatcher: Task<Void, Never>?
        var nextWaiterID = 0
        var closed = false
        /// When a waiter last gave up for want of a connection.
        var lastWaitTimeout: ContinuousClock.Instant?
        var inUse: Int { lent.count }
    }

    /// The pool's threads: bodies run there, and so do tasks that prefer them (`taskExecutor()`).
    let executor: ConnectionExecutor
    /// Abandons round trips that outlive their borrower's limits; started by the first borrower that has some.
    private let watchdog = Watchdog()

    public init(configuration: Configuration) {
        self.configuration = configuration
        executor = ConnectionExecutor(name: "poopypals-pg", maxThreads: configuration.maxConnections + 2)
    }

    /// A pool whose bodies run on `other`'s threads (with room for this pool's connections added): a task on
    /// `other.taskExecutor()` then runs this pool's bodies inline too. For a second pool used by the same
    /// requests (reads on standbys): with threads of its own, each of its requests was handed to one of them and
    /// back — measured in `make bench`'s read-scale run: 0.74× the throughput of the primary alone with the
    /// primary itself as the read pool, p99 216 ms against 20 ms.
    public init(configuration: Configuration, sharingThreadsWith other: ConnectionPool) {
        self.configuration = configuration
        executor = other.executor.share(adding: configuration.maxConnections) ? other.executor
            : ConnectionExecutor(name: "poopypals-pg", maxThreads: configuration.maxConnections + 2)
    }

    deinit {
        watchdog.stop()
        for slot in state.withLock({ $0.idle }) { slot.shutDown(on: executor) {} }
        releaseExecutor()
    }

    /// Stops this pool's use of its threads, once (`close()` and then `deinit` both come here): threads shared
    /// with another pool end only when that one is done with them too.
    private func releaseExecutor() {
        if !executorReleased.exchange(true, ordering: .acquiringAndReleasing) { executor.stop() }
    }
    private let executorReleased = Atomic<Bool>(false)

    /// The pool's threads as a task executor. A task that prefers it (`withTaskExecutorPreference`,
    /// `TaskGroup.addTask(executorPreference:)`) runs `withConnection`'s body inline, on the thread it is on,
    /// whenever a connection is free: no thread hand-off per request. The server runs each HTTP connection on it.
    /// Code on it may block for a database call; code that blocks for anything else belongs elsewhere.
    public func taskExecutor() -> any TaskExecutor { executor }

    /// True while the pool cannot serve: a borrower gave up waiting for a connection within the last `window`, and
    /// every connection is still lent out. (`/readyz` says so: an instance whose connections are all held, by slow
    /// requests or clients, serves no one, however well its database answers.)
    public func isStarved(window: Duration = .seconds(10)) -> Bool {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let last = state.lastWaitTimeout, now - last < window else { return false }
            return state.idle.isEmpty && state.inUse >= configuration.maxConnections
        }
    }

    public var statistics: Statistics {
        state.withLock { Statistics(open: $0.slots, inUse: $0.inUse, idle: $0.idle.count, waiting: $0.waiters.count) }
    }

    /// Borrows a connection for the duration of `body`, which runs on one of the pool's threads.
    ///
    /// A transaction left open by `body` is rolled back, and session state it left (a `SET`, an advisory lock,
    /// a temporary table) is reset, before the connection is reused. When the task is cancelled while `body`
    /// runs, the running statement is cancelled on the server (`PQcancel`) and the connection, whose state is
    /// then uncertain, is closed rather than reused.
    /// - Throws: `PostgresClientError` `.poolTimeout`, `.poolClosed` or `.connectionFailed`; `CancellationError`
    ///   when the task is cancelled while waiting; otherwise whatever `body` throws.
    @discardableResult
    public func withConnection<T: Sendable>(
        limits: RoundTripLimits? = nil, _ body: @escaping @Sendable (Connection) throws -> T
    ) async throws -> T {
        let configuration = configuration
        let borrower = Slot.Borrower(limits: limits)
        if limits != nil { watchdog.start(watching: self) }
        // On one of our threads (the task prefers a pool's executor): run the body here if a connection is free.
        if executor.isCurrent, let slot = try checkOutIfFree() {
            return try await withTaskCancellationHandler {
                let result = Result { try slot.use(configuration, as: borrower, body) }
                release(slot)
                return try result.get()
            } onCancel: {
                slot.cancel(borrower)
            }
        }
        let assigned = Slot.Assignment()
        let id = state.withLock { state -> Int in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                let start: @Sendable (Slot) -> Void = { slot in
                    self.executor.submit {
                        let result = Result { try slot.use(configuration, as: borrower, body) }
                        // Returned the moment the body is done, on this thread: the next waiter's body runs next.
                        self.release(slot)
                        continuation.resume(with: result)
                    }
                }
                let checkout = state.withLock { state -> Checkout in
                    if state.closed { return .fail(PostgresClientError(.poolClosed, "the connection pool is closed")) }
                    if Task.isCancelled { return .fail(CancellationError()) }
                    if let slot = Self.lendFree(&state, maxConnections: configuration.maxConnections) {
                        assigned.set(slot)
                        return .ready(slot)
                    }
                    state.waiters.append(Waiter(id: id, assign: { slot in assigned.set(slot) }, start: start,
                                                fail: { continuation.resume(throwing: $0) },
                                                deadline: .now + configuration.acquireTimeout))
                    if state.waitWatcher == nil { state.waitWatcher = watchWaiters() }
                    return .wait
                }
                switch checkout {
                case .ready(let slot): start(slot)
                case .fail(let error): continuation.resume(throwing: error)
                case .wait: break
                }
            }
        } onCancel: {
            // Still waiting: fail the wait. Lent (assigned under the same lock, so never in between): cancel the
            // body, borrower-scoped: once released, a late cancel finds another borrower running and does nothing.
            if !fail(waiter: id, with: CancellationError()), let slot = assigned.slot {
                slot.cancel(borrower)
            }
        }
    }

    /// Refuses new borrowers, fails the waiting ones, and closes every connection once it is returned.
    /// With `cancellingInFlight`, statements still running are cancelled on the server too (shutdown after
    /// its grace period). Returns once the idle connections are closed; it never waits for a borrower.
    public func close(cancellingInFlight: Bool = false) async {
        let (idle, waiters, lent) = state.withLock { state -> ([Slot], [Waiter], [Slot]) in
            state.closed = true
            state.waitWatcher?.cancel()
            defer { state.idle = []; state.waiters = [] }
            state.slots -= state.idle.count
            return (state.idle, state.waiters, Array(state.lent.values))
        }
        for waiter in waiters {
            waiter.fail(PostgresClientError(.poolClosed, "the connection pool is closed"))
        }
        if cancellingInFlight {
            for slot in lent { slot.cancelCurrent() }
        }
        watchdog.stop()
        for slot in idle {
            await withCheckedContinuation { done in slot.shutDown(on: executor) { done.resume() } }
        }
        // The threads end once the queue is empty; a task that still prefers them goes on on the global executor.
        releaseExecutor()
    }

    /// For the watchdog: abandons what outlived its limits. False once the pool is closed.
    fileprivate func abandonExpired() -> Bool {
        let (closed, lent) = state.withLock { ($0.closed, Array($0.lent.values)) }
        let now = RoundTripWatch.now()
        for slot in lent { slot.abandonIfExpired(now: now) }
        return !closed
    }

    // MARK: - Checkout

    private enum Checkout {
        case ready(Slot)
        case wait
        case fail(any Error)
    }

    /// An idle slot (or a new one, below the maximum), lent; nil when every slot is lent.
    private static func lendFree(_ state: inout State, maxConnections: Int) -> Slot? {
        let slot: Slot
        if let idle = state.idle.popLast() {
            slot = idle
        } else if state.slots < maxConnections {
            slot = Slot()
            state.slots += 1
        } else {
            return nil
        }
        state.lent[ObjectIdentifier(slot)] = slot
        return slot
    }

    /// For a body that runs on the caller's thread: a free slot, lent; nil when the caller has to wait.
    private func checkOutIfFree() throws -> Slot? {
        let maxConnections = configuration.maxConnections
        return try state.withLock { state -> Slot? in
            if state.closed { throw PostgresClientError(.poolClosed, "the connection pool is closed") }
            if Task.isCancelled { throw CancellationError() }
            return Self.lendFree(&state, maxConnections: maxConnections)
        }
    }

    /// The wait for a connection has its own bound (`acquireTimeout`), not the request's deadline: a burst that
    /// queues for connections is overload, answered `busy`, while the deadline is about a database that stopped
    /// answering.
    ///
    /// One task for all the waiters, started by the first and ended when none is left (both under the pool's
    /// lock): it sleeps until the earliest deadline, fails whoever has passed theirs, and sleeps again. (A task
    /// per waiter, created, woken and cancelled on the global executor, cost two to three context switches on its
    /// threads for every request that waited: under `wrk -c64` on a 16-connection pool, nearly every request.)
    /// Called under the pool's lock.
    private func watchWaiters() -> Task<Void, Never> {
        Task { [weak self] in
            while let deadline = self?.failExpiredWaiters() {
                try? await Task.sleep(until: deadline, clock: .continuous)
            }
        }
    }

    /// Fails the waiters whose deadline has passed; the earliest deadline left, or nil (the watcher ends) when
    /// no one waits or the pool is closed.
    private func failExpiredWaiters() -> ContinuousClock.Instant? {
        let now = ContinuousClock.now
        // The counts for the message are the pool's as the waits end (the waiters that end among them).
        let (expired, inUse, waiting, next) = state.withLock { state in
            let (inUse, waiting) = (state.inUse, state.waiters.count)
            let expired = state.waiters.filter { $0.deadline <= now }
            state.waiters.removeAll { $0.deadline <= now }
            if !expired.isEmpty { state.lastWaitTimeout = now }
            let next = state.closed ? nil : state.waiters.lazy.map(\.deadline).min()
            if next == nil { state.waitWatcher = nil }
            return (expired, inUse, waiting, next)
        }
        if !expired.isEmpty {
            let timeout = configuration.acquireTimeout
            for waiter in expired {
                waiter.fail(PostgresClientError(.poolTimeout,
                    "no database connection became free within \(timeout) (\(inUse) in use, \(waiting) waiting)"))
            }
            logger.warning("database connection wait timed out", metadata: ["waiters": "\(expired.count)"])
        }
        return next
    }

    /// Fails waiter `id` if it still waits; false when it does not (lent a connection, or gone).
    @discardableResult
    private func fail(waiter id: Int, with error: any Error) -> Bool {
        let waiter = state.withLock { state -> Waiter? in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index)
        }
        guard let waiter else { return false }
        waiter.fail(error)
        return true
    }

    /// One decision under one lock: hand the slot to the next waiter, keep it idle, or (pool closed) shut it.
    private func release(_ slot: Slot) {
        enum Next { case handOver(Waiter), keep, shutDown }
        let next = state.withLock { state -> Next in
            if state.closed {
                state.lent[ObjectIdentifier(slot)] = nil
                state.slots -= 1
                return .shutDown
            }
            if !state.waiters.isEmpty {  // still lent, now to the next waiter
                let waiter = state.waiters.removeFirst()
                waiter.assign(slot)
                return .handOver(waiter)
            }
            state.lent[ObjectIdentifier(slot)] = nil
            state.idle.append(slot)
            return .keep
        }
        switch next {
        case .handOver(let waiter):
            waiter.start(slot)
        case .shutDown:
            slot.shutDown(on: executor) {}
        case .keep:
            break
        }
    }
}

extension ConnectionPool {
    /// One pooled connection. `connection` is touched only by the borrower it is lent to, on one of the pool's
    /// threads (lending goes through the pool's lock); the cancel state is shared with whatever thread asks for a
    /// cancel, under `lock`.
    final class Slot: @unchecked Sendable {
        private var connection: Connection?
        private let lock = NSLock()
        /// The borrower whose body runs now, its connection's cancel token and round-trip watch; nil between borrowers.
        private var running: (borrower: Borrower, token: CancelToken, watch: RoundTripWatch)?
        /// Set by `cancelCurrent` (the pool closing, cancelling what runs): the borrower this slot is lent to is
        /// cancelled even if its body has not started, queued behind busy threads or connecting. Under `lock`.
        /// The pool is closed then, so no later borrower comes.
        private var cancelEveryone = false

        /// Which slot a waiting borrower was lent, for its cancel handler.
        final class Assignment: Sendable {
            private let value = Mutex<Slot?>(nil)
            func set(_ slot: Slot) { value.withLock { $0 = slot } }
            var slot: Slot? { value.withLock { $0 } }
        }

        /// One borrowing: a cancel is meant for it alone, never for the next borrower of the same connection.
        final class Borrower: @unchecked Sendable {
            /// Guarded by the slot's lock.
            var cancelled = false
            let limits: RoundTripLimits?
            init(limits: RoundTripLimits? = nil) { self.limits = limits }
        }

        /// Runs on a pool thread: (re)connects when needed, runs `body`, and leaves the connection clean for the next
        /// borrower: no open transaction, no session state, evicted statements closed, or else no connection.
        func use<T>(_ configuration: ConnectionPool.Configuration, as borrower: Borrower, _ body: (Connection) throws -> T) throws -> T {
            // Cancelled before anything ran: the connection is untouched, so it stays.
            if lock.withLock({ borrower.cancelled || cancelEveryone }) { throw CancellationError() }
            if let current = connection,
               !current.isUsableForCheckout() || ContinuousClock.now - current.openedAt > configuration.maxConnectionLifetime {
                connection = nil
            }
            let connection = try self.connection ?? Connection(configuration: configuration.connection)
            self.connection = connection
            let alreadyCancelled = lock.withLock { () -> Bool in
                running = (borrower, connection.cancelToken, connection.watch)
                return borrower.cancelled || cancelEveryone
            }
            defer {
                let cancelled = lock.withLock { () -> Bool in
                    running = nil
                    return borrower.cancelled || cancelEveryone
                }
                if cancelled || connection.watch.isAbandoned || connection.shouldDiscard {
                    // A cancel may still be on its way to the server: this session's state is uncertain. Or the
                    // round trip was abandoned, or the node cannot serve: a new connection may find a better one.
                    self.connection = nil
                } else {
                    tidy(connection)
                }
            }
            if alreadyCancelled { throw CancellationError() }
            return try body(connection)
        }

        private func tidy(_ connection: Connection) {
            if connection.isOpen, connection.transactionState != .idle {
                _ = try? connection.executeScript("ROLLBACK")
            }
            guard connection.isOpen, connection.transactionState == .idle else {
                self.connection = nil
                return
            }
            if connection.sessionMayBeDirty {
                do { try connection.resetSession() } catch { self.connection = nil; return }
            }
            connection.closeReleasedStatements()
        }

        /// From the watchdog: abandons the round trip in flight if it outlived its borrower's limits, and asks the
        /// server to cancel it (on a thread of its own: a hung server may never answer the cancel request either).
        func abandonIfExpired(now: Int64) {
            let token = lock.withLock { () -> CancelToken? in
                guard let running, let limits = running.borrower.limits, let sentAt = running.watch.inFlightSince,
                      !running.watch.isAbandoned, limits.expired(sentAt: sentAt, now: now) else { return nil }
                // Under the lock: the connection, and so its socket, is alive while it runs a borrower.
                running.watch.abandon()
                return running.token
            }
            guard let token else { return }
            CancelRequests.send(token)
        }

        /// Cancels what the current borrower runs, whoever it is (shutdown).
        /// From now on, also a borrower whose body has not started (`cancelEveryone`): one lent this slot while
        /// every thread was busy ran its statements uncancelled once a thread was free, past the shutdown's hard stop.
        func cancelCurrent() {
            let borrower = lock.withLock { () -> Borrower? in
                cancelEveryone = true
                return running?.borrower
            }
            guard let borrower else { return }
            cancel(borrower)
        }

        /// From any thread: cancels the statement `borrower` runs, if it runs now, and marks the connection for
        /// closing after it. The cancel request is a network call, so it runs on a thread of its own, and is sent
        /// again while `borrower` still runs: one that reaches the server before its backend has read the
        /// statement is dropped (PostgreSQL ignores a cancel while it waits for a command), and the statement then
        /// ran to its end (a test's `pg_sleep(300)` did, when a loaded machine was slow to send it).
        func cancel(_ borrower: Borrower) {
            let token = lock.withLock { () -> CancelToken? in
                borrower.cancelled = true
                return running?.borrower === borrower ? running?.token : nil
            }
            guard let token else { return }
            CancelRequests.send(token, whileRunning: { [self] in lock.withLock { running?.borrower === borrower } })
        }

        /// Closes the connection on one of the pool's threads.
        func shutDown(on executor: ConnectionExecutor, then done: @escaping @Sendable () -> Void) {
            executor.submit { [self] in
                connection = nil
                done()
            }
        }
    }
}

/// One thread per pool that needs it: every 50 ms, abandons round trips past their limits. It holds the pool
/// weakly and ends when the pool is closed or gone.
private final class Watchdog: Sendable {
    private let state = LockedState((started: false, stopped: false))

    func start(watching pool: ConnectionPool) {
        let first = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started && !state.stopped
        }
        guard first else { return }
        let thread = Thread { [weak pool, self] in
            while !self.state.withLock({ $0.stopped }) {
                usleep(50_000)
                guard let pool, pool.abandonExpired() else { return }
            }
        }
        thread.name = "poopypals-pg-watchdog"
        thread.start()
    }

    func stop() { state.withLock { $0.stopped = true } }
}

/// Cancel requests (`PQcancel`) on threads of their own, at most 16 at once: each opens a connection to a server
/// that may hang, and a hung server must not make this grow without bound. Past the limit a request is dropped
/// (the abandoned connection is closed anyway, and `statement_timeout` stops what the server runs).
enum CancelRequests {
    private static let inFlight = LockedState(0)

    /// Seconds between repeats of a cancel (`whileRunning`), and how many at most.
    static let repeatInterval = 1.0, repeats = 30

    /// Sends a cancel request for `token`; with `whileRunning`, again every `repeatInterval` while it says the
    /// statement still runs (at most `repeats` times; the thread sleeps between them, holding no admission).
    static func send(_ token: CancelToken, whileRunning: (@Sendable () -> Bool)? = nil) {
        guard admit() else { return }
        Thread.detachNewThread {
            token.cancel()
            inFlight.withLock { $0 -= 1 }
            guard let whileRunning else { return }
            for _ in 0..<repeats {
                Thread.sleep(forTimeInterval: repeatInterval)
                guard whileRunning() else { return }
                guard admit() else { continue }
                token.cancel()
                inFlight.withLock { $0 -= 1 }
            }
        }
    }

    private static func admit() -> Bool {
        inFlight.withLock { count -> Bool in
            guard count < 16 else { return false }
            count += 1
            return true
        }
    }
}
