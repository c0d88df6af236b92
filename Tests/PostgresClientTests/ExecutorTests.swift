import Foundation
@testable import PostgresClient

import Testing
import TestSupport

/// Tasks that prefer the pool's executor (`ConnectionPool.taskExecutor()`, what the HTTP server does for every
/// connection): the body runs on the task's own thread, and everything the pool promises still holds (the
/// promises both placements share are `PoolTests`' parameterised tests).
@Suite("Connection pool executor")
struct ExecutorTests {
    private static var threadID: UInt { UInt(bitPattern: Int(bitPattern: UInt(pthread_self()))) }

    @Test func aTaskOnThePoolsExecutorRunsTheBodyOnItsOwnThreadWithoutAHandOff() async throws {
        try await TestDatabase.with { db in
            let pool = db.pool(size: 2)
            let threads = try await withTaskExecutorPreference(pool.taskExecutor()) {
                var seen: [UInt] = []
                for _ in 0..<20 {
                    seen.append(Self.threadID)
                    seen.append(try await pool.withConnection { connection in
                        try connection.query("SELECT 1")
                        return Self.threadID
                    })
                }
                seen.append(Self.threadID)
                return (seen, ConnectionExecutor.isCurrent)
            }
            // One thread throughout: before, inside and after every body. Before the change each body ran on a
            // connection thread and the task went on elsewhere.
            #expect(Set(threads.0).count == 1)
            #expect(threads.1)
            #expect(!ConnectionExecutor.isCurrent)
            await pool.close()
        }
    }

    /// A body blocked in the database holds one thread; the other tasks on the executor go on meanwhile (the
    /// executor has threads for every connection and two more), so one slow request does not stall the rest.
    /// "Meanwhile" is read from the slow body itself (a flag it sets when its statement returns), not from clocks
    /// read in tasks that a loaded machine may resume seconds late.
    @Test func aSlowBodyDoesNotStallTheOtherTasksOnTheExecutor() async throws {
        try await TestDatabase.with { db in
            // A minute to wait for a connection, and a slow statement (cancelled at the end) that outlasts it: the
            // second connection is opened while the slow one runs, and under CI's load that login took more than
            // the pool's default 10 s once (CI of stop 60); how long the quick ones wait is not what is tested.
            let pool = db.pool(size: 2, acquireTimeout: .seconds(60))
            let executor = pool.taskExecutor()
            let slowStarted = Locked(false)
            let slowReturned = Locked(false)
            let slow = Task(executorPreference: executor) {
                try await pool.withConnection { conn in
                    slowStarted.withLock { $0 = true }
                    defer { slowReturned.withLock { $0 = true } }
                    try conn.query("SELECT pg_sleep(300)")
                }
            }
            while !slowStarted.value { try await Task.sleep(for: .milliseconds(10)) }
            let started = ContinuousClock.now
            let quick = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<10 {
                    group.addTask(executorPreference: executor) {
                        try await pool.withConnection { try $0.query("SELECT \(i)::int")[0].decode(0, as: Int.self) }
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(quick == 45)
            // Done while the slow statement still runs, not behind its 300 s.
            #expect(!slowReturned.value, "the quick ones took \(ContinuousClock.now - started)")
            slow.cancel()  // cancels the statement on the server
            _ = await slow.result
            await pool.close()
        }
    }

    @Test func cancellingATaskOnTheExecutorCancelsItsStatementOnTheServer() async throws {
        try await TestDatabase.with { db in
            let pool = db.pool(size: 1)
            let started = ContinuousClock.now
            let task = Task(executorPreference: pool.taskExecutor()) {
                try await pool.withConnection { try $0.query("SELECT pg_sleep(300)") }
            }
            try await Task.sleep(for: .milliseconds(300))
            task.cancel()
            await #expect(throws: (any Error).self) { try await task.value }
            // Not the 300 s asked for; 15 s with a 30 s sleep took 17.3 s under make test's load once (issue 56).
            #expect(ContinuousClock.now - started < .seconds(120))
            // Nothing keeps sleeping on the server (in this test's database: other tests sleep too), and the pool
            // works on the executor.
            let deadline = ContinuousClock.now + .seconds(5)
            var sleeping = 1
            while sleeping > 0, ContinuousClock.now < deadline {
                sleeping = try await withTaskExecutorPreference(pool.taskExecutor()) {
                    try await pool.withConnection { conn in
                        try conn.query("""
                            SELECT count(*) FROM pg_stat_activity
                            WHERE datname = \(db.name) AND query LIKE '%pg_sleep(300)%' AND state = 'active' AND pid <> pg_backend_pid()
                            """)[0].decode(0, as: Int.self)
                    }
                }
                if sleeping > 0 { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(sleeping == 0)
            await pool.close()
        }
    }

    @Test func anAlreadyCancelledTaskOnTheExecutorDoesNotBorrow() async throws {
        try await TestDatabase.with { db in
            let pool = db.pool(size: 1)
            let ran = Locked(false)
            let task = Task(executorPreference: pool.taskExecutor()) {
                withUnsafeCurrentTask { $0?.cancel() }
                try await pool.withConnection { _ in ran.withLock { $0 = true } }
            }
            await #expect(throws: CancellationError.self) { try await task.value }
            #expect(!ran.value)
            await pool.close()
        }
    }

    /// Closing the pool under tasks that prefer its executor: nothing hangs, and a task that goes on after the
    /// threads have ended finds the pool closed (its slices run on the global executor).
    @Test func closingThePoolUnderTasksOnItsExecutorNeverHangs() async throws {
        try await TestDatabase.with { db in
            let clock = ContinuousClock.now
            for _ in 0..<40 {
                let pool = db.pool(size: 2, acquireTimeout: .seconds(2))
                let executor = pool.taskExecutor()
                let borrowers = Task {
                    await withTaskGroup(of: Void.self) { group in
                        for _ in 0..<6 {
                            group.addTask(executorPreference: executor) {
                                _ = try? await pool.withConnection { try $0.query("SELECT 1") }
                            }
                        }
                    }
                }
                try await Task.sleep(for: .milliseconds(Int.random(in: 0...5)))
                await pool.close()
                await borrowers.value
                #expect(pool.statistics.inUse == 0)
            }
            let pool = db.pool(size: 1)
            let executor = pool.taskExecutor()
            await pool.close()
            let late = Task(executorPreference: executor) { try await pool.withConnection { _ in } }
            let error = await #expect(throws: PostgresClientError.self) { try await late.value }
            #expect(error?.kind == .poolClosed)
            // A hang never ends; 64 s under make test's load once (issue 56): a bound only a hang reaches.
            #expect(ContinuousClock.now - clock < .seconds(300))
        }
    }

    /// Once the pool is closed, a task on its executor goes on on the global executor: it is not queued behind
    /// a pool thread that is still blocked (in a statement, or an export waiting for a reader).
    @Test func afterCloseTasksDoNotWaitBehindABlockedThread() async throws {
        try await TestDatabase.with { db in
            let pool = db.pool(size: 1)
            let executor = pool.taskExecutor()
            let holding = Locked(false)
            let release = Locked(false)
            let holder = Task(executorPreference: executor) {
                try await pool.withConnection { _ in
                    holding.withLock { $0 = true }
                    let deadline = Date().addingTimeInterval(120)
                    while !release.value && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
                }
            }
            while !holding.value { try await Task.sleep(for: .milliseconds(10)) }
            await pool.close()
            let started = ContinuousClock.now
            let late = Task(executorPreference: executor) { try await pool.withConnection { _ in } }
            let error = await #expect(throws: PostgresClientError.self) { try await late.value }
            #expect(error?.kind == .poolClosed)
            // Not behind the holder's 120 s; generous, as other tests may keep the machine's two cores busy (a loaded run
            // once measured 3.002 s against the 3 s this said before).
            #expect(ContinuousClock.now - started < .seconds(60), "not behind the holder's 120 s")
            release.withLock { $0 = true }
            try await holder.value
        }
    }

    /// Shutdown after its grace (`close(cancellingInFlight: true)`, `serve`'s ShutdownDeadline) cancels what
    /// borrowers run, and also what a borrower is about to run: a body lent the connection but still queued for a
    /// thread (every thread busy, as on a loaded server) or still connecting when the cancel came. Before, only a
    /// body already running was cancelled: a queued one then ran its statements uncancelled, however long they
    /// waited, past the shutdown's hard stop (its client then got no answer at all).
    @Test func closingWithCancelCancelsABodyStillQueuedForAThread() async throws {
        try await TestDatabase.with { db in
            let pool = db.pool(size: 1)
            let executor = pool.taskExecutor()
            // Every thread the executor may have (its connection and two more) held by a task that blocks it.
            let threads = 3
            let blocking = Locked(0), release = Locked(false)
            let blockers = (0..<threads).map { _ in
                Task(executorPreference: executor) {
                    blocking.withLock { $0 += 1 }
                    let deadline = Date().addingTimeInterval(120)
                    while !release.value && Date() < deadline { usleep(5_000) }  // blocks the thread, as a statement does
                }
            }
            defer { release.withLock { $0 = true } }
            let patience = ContinuousClock.now + .seconds(60)
            while blocking.value < threads, ContinuousClock.now < patience { try await Task.sleep(for: .milliseconds(5)) }
            try #require(blocking.value == threads, "the executor's threads were not all held")
            // The pool's only connection lent to a body that waits for a thread.
            let ran = Locked(false)
            let borrower = Task {
                try await pool.withConnection { conn -> Int in
                    ran.withLock { $0 = true }
                    return try conn.query("SELECT 1")[0].decode(0, as: Int.self)
                }
            }
            while pool.statistics.inUse < 1, ContinuousClock.now < patience { try await Task.sleep(for: .milliseconds(5)) }
            try #require(pool.statistics.inUse == 1, "the body was not lent the connection")
            await pool.close(cancellingInFlight: true)
            release.withLock { $0 = true }
            for blocker in blockers { await blocker.value }
            await #expect(throws: CancellationError.self) { _ = try await borrower.value }
            #expect(!ran.value, "the body ran after the pool was closed cancelling what its borrowers run")
        }
    }

    /// A second pool used by the same requests (reads on standbys) runs its bodies on the first pool's threads:
    /// inline, like the first's. With threads of its own every body was handed over and back (`make bench`'s
    /// read-scale run: 0.74× the throughput, p99 216 ms against 20 ms). Either pool closes without stopping the
    /// other's threads.
    @Test func aPoolSharingAnotherPoolsThreadsRunsItsBodiesInline() async throws {
        try await TestDatabase.with { db in
            let requests = db.pool(size: 2)
            let reads = ConnectionPool(configuration: .init(connection: db.configuration, maxConnections: 2), sharingThreadsWith: requests)
            let threads = try await withTaskExecutorPreference(requests.taskExecutor()) {
                var seen: [UInt] = []
                for _ in 0..<10 {
                    seen.append(Self.threadID)
                    seen.append(try await reads.withConnection { connection in
                        try connection.query("SELECT 1")
                        return Self.threadID
                    })
                    seen.append(try await requests.withConnection { _ in Self.threadID })
                }
                return seen
            }
            #expect(Set(threads).count == 1, "every body on the task's own thread")
            // The first pool closed, the threads stay for the second; then both are done.
            await requests.close()
            let after = try await withTaskExecutorPreference(reads.taskExecutor()) {
                try await reads.withConnection { connection in try connection.query("SELECT 2").first?.decode(0, as: Int.self) }
            }
            #expect(after == 2)
            await reads.close()
            let error = await #expect(throws: PostgresClientError.self) { try await reads.withConnection { _ in } }
            #expect(error?.kind == .poolClosed)
        }
    }
}
