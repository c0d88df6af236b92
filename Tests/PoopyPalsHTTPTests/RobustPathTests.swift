import Foundation
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import TestSupport

@Suite("The API under production conditions")
struct RobustPathTests {
    /// base64url of `v1|<micros>|<uuid>`: what a crafted `before` looks like.
    static func cursor(_ micros: String) -> String {
        Base64URL.encode(Array("v1|\(micros)|\(UUID().uuidString.lowercased())".utf8))
    }

    @Test func craftedCursorsAreA400AndTheServerLives() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            // The last microsecond of year 9999 passed the check and rounded into year 10000 (issue 42, item 7: 400
            // invalid_request "a NUL character?"); a log's time is a whole second, so no cursor carries a fraction.
            for micros in ["9223372036854775807", "-9223372036854775808", "-1", "99999999999999999999", "1e300",
                           "253402300799999999", "1500000"] {
                let reply = try await api.send("GET", "/v1/logs?before=\(Self.cursor(micros))", device: device)
                #expect(reply.status == 400, "\(micros)")
                #expect(reply.errorCode == "invalid_field", "\(micros)")
                #expect(reply.text.contains("before"), "\(micros)")
            }
            let earliest = try await api.send("GET", "/v1/logs?before=\(Self.cursor("0"))", device: device)
            #expect(earliest.status == 200)
            let latest = try await api.send("GET", "/v1/logs?before=\(Self.cursor("253402300799000000"))", device: device)
            #expect(latest.status == 200)
            #expect(try await api.send("GET", "/healthz").status == 200)
        }
    }

    @Test func anOnlineColumnTypeChangeFailsNoRequest() async throws {
        try await TestDatabase.withAPI(poolSize: 4) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let created = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4,"notes":"x"}"#)
            #expect(created.status == 201)
            let id = try #require(created.json?["id"] as? String)
            // Warm every pooled connection.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<16 { group.addTask { _ = try await api.send("GET", "/v1/logs", device: device) } }
                try await group.waitForAll()
            }
            try await db.withConnection { try $0.executeScript("ALTER TABLE poop_logs ALTER COLUMN notes TYPE varchar(2000)") }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<80 {
                    group.addTask {
                        switch index % 4 {
                        case 0: try await api.send("GET", "/v1/logs", device: device).status
                        case 1: try await api.send("GET", "/v1/logs/\(id)", device: device).status
                        case 2: try await api.send("PATCH", "/v1/logs/\(id)", device: device, json: #"{"bristolType":5}"#).status
                        default: try await api.send("POST", "/v1/logs", device: device,
                                                    json: #"{"occurredAt":"2026-11-20T09:00:00Z","bristolType":3}"#).status
                        }
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.count == 80)
            #expect(statuses.allSatisfy { (200...201).contains($0) }, "\(statuses.filter { $0 >= 300 })")
        }
    }

    @Test func aHeldLockGivesA503TimeoutWhileLivenessAndReadinessStayFast() async throws {
        // The lock timeout gives the 503; the statement timeout is 10 s so that the statements around the upload's
        // (its device's lookup, the list at the end) are not what fails on a loaded machine.
        try await TestDatabase.withAPI(poolSize: 2, configure: { $0.timeouts = RequestTimeouts(statement: .seconds(10), lock: .milliseconds(500)) }) { api, db in
            let device = UUID()
            // Registered through a server with the default timeouts: on a loaded machine (CI, both cores busy with
            // the whole suite) a first request on a fresh database can take longer than this server's 1 s, and
            // what is under test is the upload below, not the set-up.
            let setUp = try await LiveAPI.start(db.configuration, poolSize: 1)
            let registered = try await setUp.send("PUT", "/v1/device", device: device)
            await setUp.stop()
            #expect(registered.status == 201, "\(registered.status) \(registered.text)")
            let release = Locked(false)
            // Held 120 s (released at the end): the bounds below are far from it, and far above what a loaded
            // machine takes (issue 56: liveness took 10.2 s once, under a 10 s bound, with the lock held 30 s).
            let lock = try await db.inAnotherSession(holdingFor: 120, release: release) {
                try $0.executeScript("LOCK TABLE poop_logs IN ACCESS EXCLUSIVE MODE")
            }
            let started = ContinuousClock.now
            async let upload = api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#)
            try await Task.sleep(for: .milliseconds(100))
            let live = ContinuousClock.now
            #expect(try await api.send("GET", "/healthz").status == 200)
            #expect(ContinuousClock.now - live < .seconds(60))  // not the 120 s the lock is held
            #expect(try await api.readyz(until: 200).status == 200)
            let reply = try await upload
            #expect(reply.status == 503)
            #expect(reply.errorCode == "timeout")
            #expect(reply.header("Retry-After") != nil)
            #expect(ContinuousClock.now - started < .seconds(90))  // not the 120 s the lock is held
            // Nothing of ours waits on the server, though the lock is still held.
            let waiting = try await db.withConnection { try db.sessionsWaitingOnALock(in: $0) }
            #expect(waiting == 0)
            release.withLock { $0 = true }
            try await lock.value
            let list = try await api.send("GET", "/v1/logs", device: device)
            #expect((list.json?["items"] as? [Any])?.isEmpty == true)  // the timed-out write did not happen
        }
    }

    /// A full pool is a 503 `busy` (overload), not `database_unavailable`; and `/readyz` says the instance cannot
    /// serve while its connections are all held and requests time out waiting.
    @Test func aFullPoolIsA503BusyNotDatabaseUnavailable() async throws {
        // The upload waits on the lock up to 60 s, and the lock is held up to 120 s: with 15 s and 30 s, a loaded
        // make test once let the upload's lock wait end before the checks below were made (CI of c29af06, PostgreSQL
        // 18: /readyz 200 and the upload not 201).
        try await TestDatabase.withAPI(poolSize: 1, configure: {
            $0.acquireTimeout = .milliseconds(300)
            $0.timeouts = RequestTimeouts(statement: .seconds(60), lock: .seconds(60))
        }) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let release = Locked(false)
            let lock = try await db.inAnotherSession(holdingFor: 120, release: release) {
                try $0.executeScript("LOCK TABLE poop_logs IN ACCESS EXCLUSIVE MODE")
            }
            async let blocked = api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#,
                                         timeout: 90)
            // Until the upload holds the pool's only connection, waiting on the lock.
            try await db.waitUntilSessionsWaitOnALock()
            // Readiness tells the truth: this instance serves no one now (issue 41: it said 200 throughout). It says so
            // for 10 s after a request timed out waiting for a connection: each check follows such a request at once,
            // and one of three must see it (a pause of the loaded machine between the two is not the service's).
            var seen: [String] = []
            for _ in 0..<3 {
                let busy = try await api.send("GET", "/v1/device", device: device)
                #expect(busy.status == 503)
                #expect(busy.errorCode == "busy")
                #expect(busy.header("Retry-After") != nil)
                let ready = try await api.send("GET", "/readyz")
                seen.append("\(ready.status) \(ready.errorCode ?? "-")")
                if ready.status == 503 { break }
            }
            #expect(seen.last == "503 busy", "readiness answered \(seen)")
            release.withLock { $0 = true }
            #expect(try await blocked.status == 201)
            try await lock.value
            // Once a connection is free again, ready again.
            #expect(try await api.readyz(until: 200).status == 200)
        }
    }

    /// A device with two requests at the database has its third wait `deviceWait` (the configuration's: the tests'
    /// servers wait 30 s, production 3 s): answered when a slot comes free within it, else 429 `device_busy` with
    /// `Retry-After`. Other devices are served meanwhile.
    @Test func aDevicesThirdRequestWaitsItsDeviceWaitThenIs429DeviceBusy() async throws {
        try await TestDatabase.withAPI(poolSize: 4, configure: {
            $0.deviceWait = .milliseconds(300)
            $0.timeouts = RequestTimeouts(statement: .seconds(25), lock: .seconds(25))
        }) { impatient, db in
            let patient = try await LiveAPI.start(db.configuration, poolSize: 4) {
                $0.deviceWait = .seconds(20)
                $0.timeouts = RequestTimeouts(statement: .seconds(25), lock: .seconds(25))
            }
            defer { Task { await patient.stop() } }
            for waits in [false, true] {
                let api = waits ? patient : impatient
                let device = UUID()
                #expect(try await TransportTests.register(device, on: db) == 201)
                let release = Locked(false)
                let lock = try await db.inAnotherSession(holdingFor: 30, release: release) {
                    try $0.executeScript("LOCK TABLE poop_logs IN ACCESS EXCLUSIVE MODE")
                }
                async let first = api.send("GET", "/v1/logs", device: device)
                async let second = api.send("GET", "/v1/logs", device: device)
                try await db.waitUntilSessionsWaitOnALock(count: 2)
                async let third = api.send("GET", "/v1/logs", device: device)
                #expect(try await api.send("PUT", "/v1/device", device: UUID()).status == 201)
                if waits {
                    // Longer than production's 3 s: the third is still waiting for a slot, and gets one.
                    try await Task.sleep(for: .seconds(4))
                    release.withLock { $0 = true }
                    #expect(try await third.status == 200)
                } else {
                    let refused = try await third
                    #expect(refused.status == 429)
                    #expect(refused.errorCode == "device_busy")
                    #expect(refused.header("Retry-After") != nil)
                    release.withLock { $0 = true }
                }
                #expect(try await first.status == 200)
                #expect(try await second.status == 200)
                try await lock.value
            }
        }
    }

    @Test func readinessFailsWhenTheDatabaseIsGoneAndLivenessDoesNot() async throws {
        let api = try await LiveAPI.start(ConnectionConfiguration(connectionString: "postgresql://nobody@127.0.0.1:1/none", connectTimeoutSeconds: 2))
        let ready = try await api.send("GET", "/readyz", headers: ["X-Request-ID": "not-ready-1"])
        #expect(ready.status == 503)
        #expect(ready.errorCode == "database_unavailable")
        #expect(ready.text.contains("not reachable"), "\(ready.text)")
        #expect(try await api.send("GET", "/healthz").status == 200)
        await api.stop()
        // One warning with the cause, then the request line: it wrote a second warning dumping APIError(…).
        let lines = api.logs.value.filter { $0.contains("not-ready-1") }
        #expect(lines.filter { $0.hasPrefix("warning") }.count == 1, "\(lines)")
        #expect(!lines.contains { $0.contains("APIError(") }, "\(lines)")
    }

    /// Behind PgBouncer, after a switchover, 160 of 160 POSTs got 500 while /readyz said 200: readiness never asked
    /// whether the node takes writes. A read-only node (every new session read-only, as on a standby) is now
    /// not ready, and a write there is a 503 with Retry-After that promises nothing changed, never a 500.
    @Test func aReadOnlyNodeIsNotReadyAndItsWritesAre503() async throws {
        try await TestDatabase.withAPI(poolSize: 2) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let toggle = { (on: Bool) in
                _ = try await db.withConnection { conn in
                    try conn.executeScript("BEGIN READ WRITE; DO $$ BEGIN EXECUTE format('ALTER DATABASE %I "
                        + (on ? "SET default_transaction_read_only = on" : "RESET default_transaction_read_only")
                        + "', current_database()); END $$; COMMIT")
                }
            }
            try await toggle(true)
            // Sessions made before the change are not read-only: end them, as a demotion's restart does, and wait
            // until they are gone (a probe sent to a session still ending is asked again: FailoverTests.readinessOnAConnectionTerminatedUnderItAsksAgainOnAFreshOne).
            try await db.withConnection { conn in
                try conn.executeScript("BEGIN READ WRITE; SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'; COMMIT")
            }
            let ready = try await api.send("GET", "/readyz")
            #expect(ready.status == 503)
            #expect(ready.errorCode == "database_unavailable")
            #expect(ready.text.contains("read-only"), "\(ready.text)")
            let write = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#)
            #expect(write.status == 503, "\(write.text)")
            #expect(write.errorCode == "database_unavailable")
            #expect(write.header("Retry-After") != nil)
            try await toggle(false)
            #expect(try await api.readyz(until: 200).status == 200)
            #expect(try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#).status == 201)
        }
    }

    /// A wrong password was answered "the database is not reachable": readiness now names the class of the cause
    /// (from libpq's PQconnectionUsedPassword, not its message text), never the text itself.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["DATABASE_URL"]?.hasPrefix("postgresql://") == true))
    func readinessNamesARefusedLoginAsSuch() async throws {
        var url = try #require(URLComponents(string: ProcessInfo.processInfo.environment["DATABASE_URL"] ?? ""))
        url.password = "Wr0ngPassw0rd"
        // Time enough to be refused: a login that times out on a loaded machine is "not reachable", rightly.
        let api = try await LiveAPI.start(ConnectionConfiguration(connectionString: try #require(url.string), connectTimeoutSeconds: 30))
        let ready = try await api.send("GET", "/readyz")
        await api.stop()
        #expect(ready.status == 503)
        #expect(ready.errorCode == "database_unavailable")
        #expect(ready.text.contains("authentication failed"), "\(ready.text)")
        #expect(!ready.text.contains("Wr0ngPassw0rd") && !ready.text.contains(url.user ?? "poopypals"))
    }

    /// Logs an operator can read: an expected 409 is no error or warning line, a health probe answered 200 is
    /// debug, not one info line every few seconds.
    @Test func expectedRefusalsAndProbesDoNotFloodTheLog() async throws {
        try await TestDatabase.withAPI { api, _ in
            let (first, second) = (UUID(), UUID())
            _ = try await api.send("PUT", "/v1/device", device: first)
            _ = try await api.send("PUT", "/v1/device", device: second)
            let email = "quiet-\(UUID())@example.com"
            #expect(try await api.send("PUT", "/v1/profile", device: first, token: try await api.token(email: email)).status == 200)
            let conflict = try await api.send("PUT", "/v1/profile", device: second, token: try await api.token(email: email),
                                              headers: ["X-Request-ID": "quiet-409-\(first)"])
            #expect(conflict.status == 409)
            #expect(try await api.send("GET", "/healthz", headers: ["X-Request-ID": "quiet-health-\(first)"]).status == 200)
            let lines = api.logs.value + CapturedLogs.all
            let refusal = lines.filter { $0.contains("quiet-409-\(first)") }
            #expect(!refusal.isEmpty)
            #expect(!refusal.contains { $0.hasPrefix("error") || $0.hasPrefix("warning") || $0.hasPrefix("critical") }, "\(refusal)")
            let probe = lines.filter { $0.contains("quiet-health-\(first)") }
            #expect(probe.contains { $0.hasPrefix("debug") }, "\(probe)")
            #expect(!probe.contains { $0.hasPrefix("info") }, "\(probe)")
        }
    }
}

@Suite("Metrics that move")
struct RetryMetricTests {
    static func retries(_ api: LiveAPI) async throws -> Double {
        let text = try await api.metrics().text
        let line = text.split(separator: "\n").first { $0.hasPrefix("poopypals_db_retries_total ") }
        return line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
    }

    /// A retry forced by an online column type change under the second round trip of a transaction (GET /v1/export
    /// reads its profile after its device): the request succeeds and the retries counter, created after the metrics
    /// backend, moves. (A statement stale in a transaction's first round trip is sent again by the client itself.)
    @Test func aForcedRetryMovesTheRetriesCounter() async throws {
        try await TestDatabase.withAPI(poolSize: 1) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let token = try await api.token(email: "metrics@example.com")
            #expect(try await api.send("PUT", "/v1/profile", device: device, token: token).status == 200)
            for _ in 0..<2 { #expect(try await api.send("GET", "/v1/export", device: device).status == 200) }
            let before = try await Self.retries(api)
            try await db.withConnection { try $0.executeScript("ALTER TABLE users ALTER COLUMN full_name TYPE varchar(300)") }
            let reply = try await api.send("GET", "/v1/export", device: device)
            #expect(reply.status == 200, "\(reply.text)")
            #expect(try await Self.retries(api) >= before + 1)
        }
    }
}
