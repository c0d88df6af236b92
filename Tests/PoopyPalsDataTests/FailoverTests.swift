import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// What a PostgreSQL cluster does to the data layer during a failover, reproduced on one server: a node that
/// turns read-only under warm connections (a switchover), a server process that stops answering (a hung primary),
/// a pooler that drops the startup options. The whole cluster is exercised by scripts/failover.py.
@Suite("Failover: read-only nodes, hung servers, deadlines, unknown outcomes")
struct FailoverTests {
    /// Makes new sessions of the test database read-only (`on`) or not, as a demoted primary is.
    static func readOnlySessions(_ db: TestDatabase, _ on: Bool) async throws {
        try await db.withConnection { conn in
            try conn.executeScript(on
                ? "BEGIN READ WRITE; DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$; COMMIT"
                : "BEGIN READ WRITE; DO $$ BEGIN EXECUTE format('ALTER DATABASE %I RESET default_transaction_read_only', current_database()); END $$; COMMIT")
        }
    }

    /// After a switchover, warm connections reach the demoted node: a write there got SQLSTATE 25006, answered 500,
    /// and the connection was kept, so every write on it failed until its lifetime ended.
    @Test func aWriteOnAWarmConnectionToANodeThatTurnedReadOnlyIsRetriedOnAFreshOne() async throws {
        try await TestDatabase.withMigrated { db in
            let device = try DeviceID(UUID())
            let setUp = Database(pool: db.pool(size: 1))
            _ = try await DeviceRepository(database: setUp).register(DeviceInfo(), as: device)
            await setUp.pool.close()

            try await Self.readOnlySessions(db, true)
            let database = Database(pool: db.pool(size: 1))
            let logs = PoopLogRepository(database: database)
            _ = try await logs.list(as: device)  // the pool's one connection, now read-only, is warm
            try await Self.readOnlySessions(db, false)  // the other node is the primary now

            for number in 0..<3 {
                let created = try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 4, notes: "after \(number)"), as: device)
                #expect(created.created)
            }
            #expect(try await logs.list(as: device).items.count == 3)
            await database.pool.close()
        }
    }

    /// The server process of the pool's one connection, stopped (SIGSTOP) as a hung primary's are; nil (and the
    /// test says it was not run) when the server is not on this machine.
    static func stopServerProcess(of pool: ConnectionPool) async throws -> Int32? {
        let pid = try await pool.withConnection { $0.serverProcessID }
        guard kill(pid, 0) == 0 else {
            print("NOT RUN: the database server's processes are not on this machine (a hung server is simulated with SIGSTOP)")
            return nil
        }
        #expect(kill(pid, SIGSTOP) == 0)
        return pid
    }

    /// A hung primary (its process stopped, its TCP up) held requests without bound: 45 s until the node was
    /// killed. Now the round trip is abandoned at the request's deadline; the write whose COMMIT was sent is
    /// reported as of unknown outcome (never "nothing changed"), and a replay of it is recognised.
    @Test func aHungServerCostsTheDeadlineAndAnUnansweredCommitIsAnUnknownOutcome() async throws {
        try await TestDatabase.withMigrated { db in
            let device = try DeviceID(UUID())
            let setUp = Database(pool: db.pool(size: 1))
            _ = try await DeviceRepository(database: setUp).register(DeviceInfo(), as: device)
            await setUp.pool.close()

            let timeouts = RequestTimeouts(statement: .seconds(1), lock: .milliseconds(500), deadlineMargin: .milliseconds(500))
            // Not retried here: the deadline leaves no room anyway; what is under test is the answer.
            let database = Database(pool: db.pool(size: 1), retryPolicy: .never, timeouts: timeouts)
            let logs = PoopLogRepository(database: database)
            // The pool's one connection warmed under the default limits, not the 1 s given to the hung server: its
            // first statements in a database just made load the server's caches. Under make test's parallel load
            // this test once failed with a 57014 thrown outside every expectation, and this warm-up was the only
            // statement there under the 1 s limit.
            let warm = Database(pool: database.pool, retryPolicy: .never)
            _ = try await PoopLogRepository(database: warm).list(as: device)
            // The device's stored id as an earlier request of this instance would have kept it (sql/0030), so that the
            // create below is one round trip, its COMMIT in it: else its first round trip is the id's lookup.
            let stored = try #require(warm.keptIDs.id(for: device.key))
            database.keptIDs.keep(stored, for: device.key)
            guard let pid = try await Self.stopServerProcess(of: database.pool) else { return }
            var resumed = false
            defer { if !resumed { kill(pid, SIGCONT) } }

            let log = NewPoopLog(id: UUID(), occurredAt: Date(), bristolType: 5, notes: "sent as the server hung")
            let started = ContinuousClock.now
            await #expect(throws: OutcomeUnknown.self) { try await logs.create(log, as: device) }
            let waited = ContinuousClock.now - started
            // The upper bounds here and below are for a hang (45 s before the fix), with room for make test's load:
            // 60 suites on two cores delay a timer's resumption by seconds at times (this suite failed once in the CI
            // of stop 49 with 4 s bounds; which expectation was not printed).
            #expect(waited >= .milliseconds(1400) && waited < .seconds(30), "waited \(waited)")

            // A read on a hung server is a timeout (it changed nothing), also within the deadline.
            _ = try await database.pool.withConnection { _ in }  // a fresh connection: the stopped one was dropped
            let second = try await database.pool.withConnection { $0.serverProcessID }
            #expect(second != pid)
            #expect(kill(second, SIGSTOP) == 0)
            let readStarted = ContinuousClock.now
            let readError = await #expect(throws: PostgresClientError.self) { try await logs.list(as: device) }
            #expect(readError?.kind == .deadlineExceeded)
            #expect(ContinuousClock.now - readStarted < .seconds(30), "waited \(ContinuousClock.now - readStarted)")
            kill(second, SIGCONT)

            // The stopped process had the write in its socket: resumed, it commits it. The replay is recognised.
            kill(pid, SIGCONT)
            resumed = true
            let replayer = Database(pool: db.pool(size: 1))
            var replay: (log: PoopLog, created: Bool)?
            for _ in 0..<50 where replay?.created != false {
                replay = try await PoopLogRepository(database: replayer).create(log, as: device)
                if replay?.created == true { break }  // the resumed process rolled it back: the replay made it
            }
            #expect(replay?.log.id == log.id)
            #expect(try await PoopLogRepository(database: replayer).list(as: device).items.count == 1)
            await replayer.pool.close()
            await database.pool.close()
        }
    }

    /// PgBouncer drops the startup options (ignore_startup_parameters), which set the idle-in-transaction limit;
    /// behind it a request's transaction ran without one. It is set per transaction now, like the other limits.
    @Test(.enabled(if: TestEnvironment.hasPgBouncer, "needs PGBOUNCER_URL"))
    func behindPgBouncerEveryLimitOfARequestHolds() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: try db.throughPgBouncer.pool(size: 1))
            let device = try DeviceID(UUID())
            let settings = try await database.asDevice(device) { tx in
                let row = try tx.query("""
                    SELECT current_setting('idle_in_transaction_session_timeout') AS idle, current_setting('statement_timeout') AS statement,
                           current_setting('lock_timeout') AS lock, current_setting('TimeZone') AS zone, current_setting('DateStyle') AS style
                    """)[0]
                return try ["idle", "statement", "lock", "zone", "style"].map { try row.decode($0, as: String.self) }
            }
            #expect(settings == ["1min", "5s", "2s", "UTC", "ISO, MDY"])
            await database.pool.close()
        }
    }

    /// CI failed once on /readyz: a probe sent on a connection whose server process was being terminated (a
    /// restart, an operator's pg_terminate_backend) answered "the database is not reachable" although a fresh
    /// connection would have served it. Readiness asks again, once, on a fresh connection, within its deadline.
    /// Reproduced by stopping the probe's server process, terminating it (the signal waits) and resuming it only
    /// once the probe's query is on its way.
    @Test func readinessOnAConnectionTerminatedUnderItAsksAgainOnAFreshOne() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let probe = db.pool(size: 1)
            try await database.checkReadiness(on: probe)  // the probe's one connection is warm
            guard let pid = try await Self.stopServerProcess(of: probe) else { return }
            var resumed = false
            defer { if !resumed { kill(pid, SIGCONT) } }
            let terminated = try await db.withConnection { conn in
                try conn.query("SELECT pg_terminate_backend(\(pid)::int)")[0].decode(0, as: Bool.self)
            }
            #expect(terminated)
            // Resumed 300 ms later from a thread of its own: the probe's query is on its way by then. (Slept on
            // Swift's cooperative pool, the resumption came seconds late once, under make test's load.)
            resumed = true
            Thread.detachNewThread {
                usleep(300_000)
                kill(pid, SIGCONT)
            }
            let started = ContinuousClock.now
            // A 20 s deadline, not the service's 3 s: under make test's load it once answered, ready, after 3.27 s
            // (CI of stop 37), with only the first attempt in time. What is tested is the second attempt on a fresh
            // connection; this bound is for a hang (a probe without a deadline waits for the TCP timeout).
            try await database.checkReadiness(on: probe, within: .seconds(20))
            #expect(ContinuousClock.now - started < .seconds(30), "waited \(ContinuousClock.now - started)")
            #expect(try await probe.withConnection { $0.serverProcessID } != pid)
            await probe.close()
            await database.pool.close()
        }
    }
}
