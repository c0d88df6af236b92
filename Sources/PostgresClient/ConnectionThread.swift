import Foundation

/// A dedicated OS thread that runs jobs one after another. Blocking libpq calls run here, never on Swift's
/// cooperative thread pool, whose few threads would otherwise stall behind network waits.
final class ConnectionThread: @unchecked Sendable {
    // `jobs` and `stopping` are guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var stopping = false
    private var exited = false

    private static let marker = "poopypals.connection-thread"

    init(name: String) {
        let thread = Thread { [self] in
            // Set from inside: on Linux a name given before start() is not applied to the OS thread.
            Thread.current.name = name
            Thread.current.threadDictionary[Self.marker] = true
            runLoop()
        }
        thread.start()
    }

    /// True on a pool's connection thread (where blocking libpq calls belong).
    static var isCurrent: Bool { Thread.current.threadDictionary[marker] as? Bool == true }

    /// Queues `job`; on a thread that has already ended, runs it on the caller's thread instead, so that no
    /// job (and no continuation waiting on one) is ever dropped.
    func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        if exited {
            condition.unlock()
            job()
            return
        }
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Runs `body` on this thread and waits for it without blocking the caller's thread.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try body() }) }
        }
    }

    /// Lets queued jobs finish, then ends the thread.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
    }

    private func runLoop() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopping { condition.wait() }
            if jobs.isEmpty {
                exited = true
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job()
        }
    }
}
