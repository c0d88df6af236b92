import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PoopyPalsData
import PostgresClient
#if canImport(Glibc)
import Glibc
#endif
@testable import PoopyPalsHTTP
import Testing
import TestSupport

/// What slow, idle and vanishing clients and very large exports do to `poopypals serve` (the real binary, its own
/// process). These take both cores for a while: `make test` runs them alone, after everything else.
@Suite("Under load: idle clients, mass closes, a 100 000-log export", .serialized)
struct LoadTests {
    #if canImport(Glibc)
    /// A plain TCP connection to 127.0.0.1:`port`, or nil.
    static func connect(port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { close(fd); return nil }
        return fd
    }

    /// True when the server has closed `fd` (a read returns 0 or an error at once).
    static func closedByServer(_ fd: Int32, within seconds: Double) -> Bool {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(seconds * 1000)) == 1 else { return false }
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, 0) <= 0
    }
    #endif

    /// Runs blocking socket work on a thread of its own: on Swift's cooperative pool (two threads here) it
    /// would stall every other test running meanwhile.
    static func blocking<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: work()) }.start()
        }
    }

    static func healthLatency(_ base: String) async throws -> Duration {
        let url = try #require(URL(string: base + "/healthz"))
        let started = ContinuousClock.now
        #expect(try await TestHTTP.send("GET", url, timeout: 30).status == 200)
        return ContinuousClock.now - started
    }

    #if canImport(Glibc)
    /// A returned connection goes straight to the next waiter's body, on the connection's own thread, even while
    /// every cooperative thread is blocked (a saturated server): waiting for the waiter's task to be scheduled
    /// first left connections idle and made other waiters time out (CI saw "4 in use, 5 waiting" for 10 s).
    /// Blocks the cooperative pool on purpose, so it runs here, alone.
    @Test func queuedBodiesRunWhileTheCooperativePoolIsBlocked() async throws {
        try await TestDatabase.with { db in
            let pool = db.pool(size: 2)
            let finished = Locked<[ContinuousClock.Instant]>([])
            // The two bodies that get the connections hold them until every cooperative thread is blocked, so that
            // eight wait then, whatever the machine's speed (issue 56: with bodies free to finish, "8 waiting" was a
            // passing moment a 5 ms poll could miss, and a fixed 1.5 s blockade a bet on ten bodies' time).
            let blockade = Locked((blocked: 0, released: false))
            let work = Task {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<10 {
                        group.addTask {
                            try await pool.withConnection { conn in
                                let until = ContinuousClock.now + .seconds(60)
                                while !blockade.value.released, ContinuousClock.now < until { usleep(1000) }
                                try conn.query("SELECT pg_sleep(0.01)")
                                finished.withLock { $0.append(.now) }
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            let setUp = ContinuousClock.now + .seconds(60)
            while pool.statistics.waiting < 8, ContinuousClock.now < setUp { try await Task.sleep(for: .milliseconds(5)) }
            #expect(pool.statistics.waiting == 8)
            // One blocking wait per cooperative thread (as many as cores), all at once: the last to block releases
            // the two bodies; each stays blocked until all ten bodies are done (or 30 s: the defect, bodies that
            // need a cooperative thread to start).
            let threads = ProcessInfo.processInfo.activeProcessorCount
            let ended = await withTaskGroup(of: ContinuousClock.Instant.self) { group in
                for _ in 0..<threads {
                    group.addTask {
                        blockade.withLock { state in
                            state.blocked += 1
                            if state.blocked == threads { state.released = true }
                        }
                        return Self.blockThisThread(until: { finished.value.count == 10 }, atMost: 30)
                    }
                }
                var first = ContinuousClock.now + .seconds(3600)
                for await end in group { first = min(first, end) }
                return first
            }
            try await work.value
            let times = finished.withLock { $0 }
            #expect(times.count == 10)
            let duringBlockade = times.filter { $0 <= ended }.count
            #expect(duringBlockade == 10, "\(duringBlockade) of 10 bodies ran while the cooperative pool was blocked")
            await pool.close()
        }
    }

    /// Blocks the calling thread (on purpose: a cooperative one, in the test above) until `done` or `seconds`
    /// pass; returns when it stopped blocking.
    static func blockThisThread(until done: () -> Bool, atMost seconds: Double) -> ContinuousClock.Instant {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while !done(), ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        return .now
    }


    @Test func idleAndStalledConnectionsAreClosedAfterTheIdleTimeout() async throws {
        try await TestDatabase.withMigrated { db in
            let (process, base) = try await ServeBinaryTests.serve(db, environment: ["POOPYPALS_IDLE_TIMEOUT": "1s"])
            defer { process.terminate() }
            let port = try #require(Int(base.split(separator: ":").last ?? ""))
            let idle = try #require(await Self.blocking { Self.connect(port: port) })
            let stalled = try #require(await Self.blocking { Self.connect(port: port) })
            defer { close(idle); close(stalled) }
            // Half a request line, then nothing.
            _ = "GET /healthz HT".withCString { send(stalled, $0, 15, 0) }
            #expect(await Self.blocking { Self.closedByServer(idle, within: 10) }, "an idle connection stayed open")
            #expect(await Self.blocking { Self.closedByServer(stalled, within: 10) }, "a stalled request stayed open")
        }
    }

    /// A client that trickles its request (a byte every 200 ms, never idle for the 30 s idle timeout) is cut off
    /// by the request timeout: 408 for a request begun, headers or body; an idle connection is closed silently.
    @Test func tricklingClientsAreCutOffByTheRequestTimeout() async throws {
        try await TestDatabase.withMigrated { db in
            let (process, base) = try await ServeBinaryTests.serve(db, environment: ["POOPYPALS_REQUEST_TIMEOUT": "1s"])
            defer { process.terminate() }
            let port = try #require(Int(base.split(separator: ":").last ?? ""))
            let starts = [
                ("headers", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "),
                // A well-formed device id: the route reads the body before anything else refuses it.
                ("body", "POST /v1/logs HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(UUID().uuidString)\r\n"
                    + "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{"),
            ]
            // Bounds that tell the 1 s request timeout from the 30 s idle one, with room for a loaded machine.
            for (name, start) in starts {
                let (answer, seconds) = await Self.blocking { Self.trickle(port: port, start: start, for: 25) }
                #expect(answer.hasPrefix("HTTP/1.1 408"), "\(name): \(answer.prefix(200))")
                #expect(answer.contains("request_timeout"), "\(name)")
                #expect(seconds < 20, "\(name): cut off after \(seconds) s")
            }
            let idle = try #require(await Self.blocking { Self.connect(port: port) })
            defer { close(idle) }
            let started = ContinuousClock.now
            #expect(await Self.blocking { Self.closedByServer(idle, within: 25) }, "an idle connection stayed open")
            #expect(ContinuousClock.now - started < .seconds(20))
        }
    }

    /// The request timer is armed per request without being rescheduled each time (it moves a deadline): a
    /// connection busy with requests for longer than the timeout is never cut off, and when it then stalls in a
    /// request's headers the 408 comes one timeout after the last response, neither earlier nor much later.
    @Test func aBusyConnectionOutlivesTheRequestTimeoutAndIsTimedOutWhenItStalls() async throws {
        try await TestDatabase.withMigrated { db in
            // A 3 s timeout and 7 s of requests (issue 56: with 1 s and 2.5 s, a client thread stalled a second
            // between two requests on a loaded machine looked like a server that cut a busy connection off).
            let (process, base) = try await ServeBinaryTests.serve(db, environment: ["POOPYPALS_REQUEST_TIMEOUT": "3s"])
            defer { process.terminate() }
            let port = try #require(Int(base.split(separator: ":").last ?? ""))
            let (answered, failure, stalled, sinceLast) = await Self.blocking { () -> (Int, String?, String, Double) in
                guard let fd = Self.connect(port: port) else { return (0, "no connection", "", 0) }
                defer { close(fd) }
                let began = ContinuousClock.now
                var answered = 0
                // 7 s of requests, one after another, on one connection (at most 2 000).
                while ContinuousClock.now - began < .seconds(7), answered < 2000 {
                    let answer = Self.exchange(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    guard answer.hasPrefix("HTTP/1.1 200") else { return (answered, "request \(answered + 1): \(answer.prefix(120))", "", 0) }
                    answered += 1
                    usleep(20_000)
                }
                let lastResponse = ContinuousClock.now
                usleep(300_000)
                _ = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ".withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                let stalled = Self.exchange(fd, "", waitingAtMost: 30)
                let elapsed = ContinuousClock.now - lastResponse
                return (answered, nil, stalled, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
            }
            #expect(failure == nil, "\(failure ?? "")")
            #expect(answered >= 3, "only \(answered) requests in 7 s")
            #expect(stalled.hasPrefix("HTTP/1.1 408"), "\(stalled.prefix(200))")
            // Counted from the last response's end: not before (a late read of that response shortens what the
            // client sees by its delay, hence half the timeout), nor from the connection's start (7 s ago).
            #expect(sinceLast >= 1.5, "408 after \(sinceLast) s: the timeout counts from the last response's end")
            #expect(sinceLast < 20, "408 after \(sinceLast) s")
        }
    }

    /// Sends `request`, then reads one response (its headers and `Content-Length` bytes of body) or what arrives
    /// until the server closes or `seconds` pass.
    static func exchange(_ fd: Int32, _ request: String, waitingAtMost seconds: Double = 5) -> String {
        if !request.isEmpty { _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) } }
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) == 1 else { continue }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            bytes += buffer[0..<count]
            let text = String(decoding: bytes, as: UTF8.self)
            guard let end = text.range(of: "\r\n\r\n") else { continue }
            let length = text[..<end.lowerBound].split(separator: "\r\n")
                .first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            if text[end.upperBound...].utf8.count >= length { return text }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Sends `start`, then one space every 200 ms until the server closes or `limit` seconds pass; returns what
    /// the server sent and when it closed.
    static func trickle(port: Int, start: String, for limit: Double) -> (String, Double) {
        guard let fd = connect(port: port) else { return ("", 0) }
        defer { close(fd) }
        let began = ContinuousClock.now
        _ = start.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now - began < .seconds(limit) {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 200) == 1 {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count <= 0 { break }
                text += String(decoding: buffer[0..<count], as: UTF8.self)
                continue
            }
            if send(fd, " ", 1, Int32(MSG_NOSIGNAL)) < 0 { break }
        }
        let elapsed = ContinuousClock.now - began
        return (text, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// Thousands of connections closed at once must not stall the server (issue: 6 000 → 4 s, 12 000 → 32 s).
    @Test func closingFourThousandConnectionsAtOnceDoesNotStallTheServer() async throws {
        try await TestDatabase.withMigrated { db in
            let (process, base) = try await ServeBinaryTests.serve(db, environment: ["POOPYPALS_MAX_CONNECTIONS_PER_ADDRESS": "100000"])
            defer { process.terminate() }
            let port = try #require(Int(base.split(separator: ":").last ?? ""))
            let sockets = await Self.blocking {
                var sockets: [Int32] = []
                for _ in 0..<4000 {
                    guard let fd = Self.connect(port: port) else { break }
                    sockets.append(fd)
                }
                return sockets
            }
            #expect(sockets.count == 4000)
            // Let the server accept them all: /healthz answers only after the accept queue ahead of it.
            _ = try await Self.healthLatency(base)
            // A reference from the same run, with the 4000 open: the slowest of twenty /healthz, which a machine
            // busy with other work slows as much as what follows (issue 56: the bound is not the machine's speed).
            var reference = Duration.zero
            for _ in 0..<20 {
                reference = max(reference, try await Self.healthLatency(base))
                try await Task.sleep(for: .milliseconds(20))
            }
            await Self.blocking { for fd in sockets { close(fd) } }
            var worst = Duration.zero
            let until = ContinuousClock.now + .seconds(3)
            while ContinuousClock.now < until {
                worst = max(worst, try await Self.healthLatency(base))
                try await Task.sleep(for: .milliseconds(20))
            }
            print("after closing 4000 connections at once: slowest /healthz \(worst) (before: \(reference))")
            // A debug build pays O(open connections) for each close in swift-nio-extras' ServerQuiescingHelper
            // (its dictionary of channels is copied on every change at -Onone; measured 0.6–1.1 s here for 4000,
            // 4.1 s for 8000), a release build does not (0.13 s for 4000, 0.24 s for 8000). `make test` runs
            // the debug binary: it gets a looser bound, so that it fails on a real regression, not on load.
            let bound = max(TestProject.binary.path.contains("/release/") ? .seconds(1) : .milliseconds(2500), reference * 10)
            #expect(worst < bound, "the server stalled for \(worst) (the slowest /healthz before the close: \(reference))")
        }
    }
    #endif
    /// 100 000 logs leave `poopypals serve` with at most 32 MiB more peak memory: the export is streamed.
    @Test func exportingAHundredThousandLogsStaysWithinThirtyTwoMebibytes() async throws {
        try await TestDatabase.withMigrated { db in
            let (process, base) = try await ServeBinaryTests.serve(db)
            defer { process.terminate() }
            let device = UUID()
            func send(_ method: String, _ path: String, json: String? = nil) async throws -> (Int, Data) {
                let reply = try await TestHTTP.send(method, try #require(URL(string: base + path)),
                                                    headers: ["X-Device-ID": device.uuidString], json: json, timeout: 120)
                return (reply.status, reply.body)
            }
            #expect(try await send("PUT", "/v1/device", json: "{}").0 == 201)
            let count = 100_000
            try await db.seedLogs(deviceKey: device.deviceKey, count: count, notes: true)
            #expect(try await send("GET", "/v1/logs?limit=200").0 == 200)
            let before = try Self.memory(of: process.processIdentifier)
            let (status, body) = try await send("GET", "/v1/export")
            let after = try Self.memory(of: process.processIdentifier)
            #expect(status == 200)
            let json = try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any])
            let logs = try #require(json["logs"] as? [[String: Any]])
            #expect(logs.count == count)
            #expect(logs.first?["notes"] as? String == "a note of ordinary length, number 1")
            #expect(logs.last?["notes"] as? String == "a note of ordinary length, number \(count)")
            let growth = after.peak - before.peak
            print("export of \(count) logs: \(body.count / 1024) KiB of JSON; server peak RSS \(before.peak / 1024) → \(after.peak / 1024) MiB (+\(growth / 1024) MiB)")
            #expect(growth <= 32 * 1024, "peak RSS grew by \(growth) KiB")
        }
    }

    /// VmHWM (peak resident set) and VmRSS of a process, in KiB.
    static func memory(of pid: Int32) throws -> (peak: Int, resident: Int) {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func field(_ name: String) -> Int {
            let line = status.split(separator: "\n").first { $0.hasPrefix(name + ":") } ?? ""
            return Int(line.split(whereSeparator: \.isWhitespace).dropFirst().first ?? "") ?? 0
        }
        return (field("VmHWM"), field("VmRSS"))
    }
}
