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
    /// Grows when another pool shares these threads (`share(adding:)`); guarded by `condition`.
    private var maxThreads: Int
    /// Pools using these threads: the last one to stop them stops them. Guarded by `condition`.
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

    // All below guarded by `condition`.
    private let condition = NSCondition()
    private var queue: [Work] = []
    private var head = 0
    private var threads = 0
    private var sleeping = 0
    /// Signals sent to sleeping threads and not yet taken: a second item must not count on the same sleeper.
    private var signaled = 0
    private var stopping = false

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
        condition.lock()
        defer { condition.unlock() }
        guard !stopping else { return false }
        users += 1
        maxThreads += max(0, threads)
        return true
    }

    /// Lets queued work finish, then ends the threads, once every pool sharing them has stopped them.
    func stop() {
        condition.lock()
        users -= 1
        if users <= 0 {
            stopping = true
            condition.broadcast()
        }
        condition.unlock()
    }

    private func append(_ item: Work) -> Bool {
        condition.lock()
        let (accepted, wake) = appendLocked(item)
        condition.unlock()
        // Signalled after unlocking: a thread woken while this one still holds the lock would block on it at once,
        // on a second core, and be woken again when it is released.
        if wake { condition.signal() }
        return accepted
    }

    /// Under `condition`'s lock: queues `item` unless refused; `wake` when a sleeping thread is to be signalled.
    private func appendLocked(_ item: Work) -> (accepted: Bool, wake: Bool) {
        if stopping {
            if threads == 0 { return (false, false) }
            if case .job = item { return (false, false) }
        }
        queue.append(item)
        if sleeping > signaled {
            signaled += 1
            return (true, true)
        }
        if threads < maxThreads && !stopping {
            threads += 1
            let thread = Thread { [self] in
                // Set from inside: on Linux a name given before start() is not applied to the OS thread.
                Thread.current.name = name
                if let key = Self.key { pthread_setspecific(key, UnsafeRawPointer(bitPattern: id)) }
                serve()
            }
            thread.start()
        }
        return (true, false)
    }

    private func serve() {
        let executor = asUnownedTaskExecutor()
        condition.lock()
        while true {
            while head == queue.count && !stopping {
                sleeping += 1
                condition.wait()
                sleeping -= 1
                if signaled > 0 { signaled -= 1 }
            }
            if head == queue.count {  // stopping, and nothing left
                threads -= 1
                condition.unlock()
                return
            }
            let item = queue[head]
            head += 1
            if head == queue.count {
                queue.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 64 && head * 2 >= queue.count {
                queue.removeFirst(head)
                head = 0
            }
            condition.unlock()
            switch item {
            case .closure(let closure): closure()
            case .job(let job): job.runSynchronously(on: executor)
            }
            condition.lock()
        }
    }
}
