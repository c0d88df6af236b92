import Foundation
import Synchronization

/// The threads of one connection pool, where blocking libpq calls run — never on Swift's cooperative thread
/// pool, whose few threads would otherwise stall behind network waits.
///
/// It is also a `TaskExecutor`. A task that prefers it (`ConnectionPool.taskExecutor()`) runs its async code
/// on these threads, so a borrowed connection's body runs inline, on the thread the task is already on: no
/// hand-off to another thread and back for each request (bench/README.md, "Execution model", has the numbers).
///
/// One FIFO queue, served by up to `maxThreads` threads, started on demand. A thread blocked in a database call
/// holds a lent connection, so at most `maxConnections` of them block at once; the pool allows two threads more,
/// so the other tasks on this executor always have a thread to go on with.
final class ConnectionExecutor: TaskExecutor, @unchecked Sendable {
    private enum Work {
        case closure(@Sendable () -> Void)
        case job(UnownedJob)
    }

    private let name: String
    /// Grows when another pool shares these threads (`share(adding:)`); guarded by `lock`.
    private var maxThreads: Int
    /// Pools using these threads: the last one to stop them stops them. Guarded by `lock`.
    private var users = 1
    private let id: Int
    private static let ids = Atomic<Int>(0)
    /// Which executor's thread this is: a thread-specific value (the executor's id), read on every
    /// `withConnection` — Foundation's `threadDictionary` cost 3 % of the client's CPU there. Nil if the process
    /// is out of keys: then no thread counts as ours, and bodies are handed to the threads as before.
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        return pthread_key_create(&key, nil) == 0 ? key : nil
    }()

    // All below guarded by `lock`.
    private let lock = NSLock()
    private var queue: [Work] = []
    private var head = 0
    private var threads = 0
    /// Threads waiting for work, the last one to wait on top. Work is handed to a waiting thread directly, through
    /// its own semaphore: a shared condition variable made every wake-up take its lock again, against the event
    /// loop's next append and the other threads' (a third of the server's `futex` calls under `wrk -c32` were that
    /// lock's). The thread woken is the one that waited last, whose caches are warmest. Non-empty only while
    /// `queue` is empty.
    private var idle: [Waiter] = []
    private var stopping = false

    /// One thread's wake-up: `work` is set before `wake` is signalled; nil when it is woken to stop.
    private final class Waiter: @unchecked Sendable {
        let wake = DispatchSemaphore(value: 0)
        var work: Work?
    }

    init(name: String, maxThreads: Int) {
        self.name = name
        self.maxThreads = max(1, maxThreads)
        id = Self.ids.add(1, ordering: .relaxed).newValue
    }

    /// True on one of this executor's threads (where blocking libpq calls belong).
    var isCurrent: Bool { Self.key.map { Int(bitPattern: pthread_getspecific($0)) == id } ?? false }

    /// True on any pool's thread.
    static var isCurrent: Bool { key.map { pthread_getspecific($0) != nil } ?? false }

    /// Queues `job`; once every thread has ended (the pool was closed), runs it on the caller's thread instead,
    /// so that no job (and no continuation waiting on one) is ever dropped.
    func submit(_ job: @escaping @Sendable () -> Void) {
        if !append(.closure(job)) { job() }
    }

    /// A task's next slice. Once the executor is stopping, tasks that still prefer it go on on the global
    /// executor (they find the pool closed and finish): not queued behind a thread that may still be blocked
    /// in a statement, or in an export waiting for the very task that would drain it.
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        if !append(.job(job)) { globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
    }

    /// Another pool runs its bodies on these threads too, with `threads` more of them allowed (its connections).
    /// - Returns: false when the executor is already stopping (the caller then needs threads of its own).
    func share(adding threads: Int) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !stopping else { return false }
        users += 1
        maxThreads += max(0, threads)
        return true
    }

    /// Lets queued work finish, then ends the threads, once every pool sharing them has stopped them.
    func stop() {
        lock.lock()
        users -= 1
        var woken: [Waiter] = []
        if users <= 0 {
            stopping = true
            woken = idle
            idle.removeAll()
        }
        lock.unlock()
        for waiter in woken { waiter.wake.signal() }
    }

    /// Hands `item` to the thread that waited last, or queues it (starting a thread if one more is allowed).
    /// - Returns: false when refused: the executor is stopping and no thread is left, or `item` is a task's slice.
    private func append(_ item: Work) -> Bool {
        lock.lock()
        if stopping {
            if threads == 0 { lock.unlock(); return false }
            if case .job = item { lock.unlock(); return false }
        }
        if let waiter = idle.popLast() {
            lock.unlock()
            // The waiter is no one else's now; it reads `work` once `wake` is signalled.
            waiter.work = item
            waiter.wake.signal()
            return true
        }
        queue.append(item)
        let start = threads < maxThreads && !stopping
        if start { threads += 1 }
        lock.unlock()
        if start { startThread() }
        return true
    }

    private func startThread() {
        let thread = Thread { [self] in
            // Set from inside: on Linux a name given before start() is not applied to the OS thread.
            Thread.current.name = name
            if let key = Self.key { pthread_setspecific(key, UnsafeRawPointer(bitPattern: id)) }
            serve()
        }
        thread.start()
    }

    private func serve() {
        let executor = asUnownedTaskExecutor()
        let waiter = Waiter()
        lock.lock()
        while true {
            if head < queue.count {
                let item = queue[head]
                head += 1
                if head == queue.count {
                    queue.removeAll(keepingCapacity: true)
                    head = 0
                } else if head >= 64 && head * 2 >= queue.count {
                    queue.removeFirst(head)
                    head = 0
                }
                lock.unlock()
                run(item, on: executor)
                lock.lock()
                continue
            }
            if stopping {  // and nothing left
                threads -= 1
                lock.unlock()
                return
            }
            idle.append(waiter)
            lock.unlock()
            waiter.wake.wait()
            if let item = waiter.work {
                waiter.work = nil
                run(item, on: executor)
            }
            lock.lock()
        }
    }

    private func run(_ item: Work, on executor: UnownedTaskExecutor) {
        switch item {
        case .closure(let closure): closure()
        case .job(let job): job.runSynchronously(on: executor)
        }
    }
}
