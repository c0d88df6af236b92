import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PoopyPalsData
@testable import PoopyPalsHTTP
import Testing
import TestSupport

/// The API's own request path on a connection (`APIChildChannel`, `RequestHandler`): requests in one stream are
/// answered one at a time and in order, a body over the limit is refused without losing the stream, and
/// `Connection: close` ends the connection after its answer.
@Suite("HTTP transport")
struct TransportTests {
    #if canImport(Glibc)
    static func statuses(_ answer: String) -> [String] {
        answer.matches(of: /HTTP\/1\.1 (\d{3})/).map { String($0.output.1) }
    }

    /// What arrives on `fd` until the server closes it (`closed`) or `limit` passes.
    static func readUntilClosed(_ fd: Int32, within limit: Duration) -> (text: String, closed: Bool) {
        var text = "", buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 500) == 1 else { continue }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { return (text, true) }
            text += String(decoding: buffer[0..<count], as: UTF8.self)
        }
        return (text, false)
    }

    /// Registers `device` through a server with the default timeouts: the tests with a 1 s request timeout test
    /// what follows, and on a loaded machine (the parallel suite) their own server timed the set-up out.
    static func register(_ device: UUID, on db: TestDatabase) async throws -> Int {
        let setUp = try await LiveAPI.start(db.configuration, poolSize: 1)
        let status = try await setUp.send("PUT", "/v1/device", device: device).status
        await setUp.stop()
        return status
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        try await TestDatabase.withAPI { api, _ in
            let port = try #require(api.base.port)
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let log = #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#
            let stream = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                + "GET /v1/nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
                + "POST /v1/logs HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\nContent-Type: application/json\r\nContent-Length: \(log.utf8.count)\r\n\r\n\(log)"
                + "GET /v1/logs HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\n\r\n"
            let answer = await ConformanceTests.exchange(port: port, stream)
            #expect(Self.statuses(answer) == ["200", "404", "201", "200"], "\(answer.prefix(1200))")
            // The list, answered after the upload in the same stream, holds it.
            #expect(answer.contains("\"bristolType\":4"))
        }
    }

    @Test func aBodyOverTheLimitIs413AndTheNextRequestInTheStreamIsAnswered() async throws {
        try await TestDatabase.withAPI { api, _ in
            let port = try #require(api.base.port)
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let big = String(repeating: "a", count: 200_000)
            let stream = "POST /v1/logs HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\nContent-Type: application/json\r\nContent-Length: \(big.utf8.count)\r\n\r\n\(big)"
                + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            let answer = await ConformanceTests.exchange(port: port, stream)
            #expect(Self.statuses(answer) == ["413", "200"], "\(answer.prefix(1200))")
            #expect(answer.contains("payload_too_large"))
            // A body of exactly the limit is read, not refused for its size (it is not JSON: 400).
            let limit = String(repeating: "a", count: APIContext.maxUploadSize)
            let atLimit = "POST /v1/logs HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\nContent-Type: application/json\r\nContent-Length: \(limit.utf8.count)\r\n\r\n\(limit)"
            let reply = await ConformanceTests.exchange(port: port, atLimit)
            #expect(Self.statuses(reply) == ["400"], "\(reply.prefix(600))")
            #expect(reply.contains("invalid_json"))
        }
    }

    /// Only the `Connection: close` can end the connection within the wait: the server's own timeouts are far longer.
    /// (The wait was 10 s for the answer and the close together, and the idle timeout 30 s: under make test's load
    /// the answer once took most of the 10 s, and its close came after the wait had ended.)
    @Test func connectionCloseEndsTheConnectionAfterItsAnswer() async throws {
        try await TestDatabase.withAPI(configure: {
            $0.requestTimeout = .seconds(600)
            $0.idleTimeout = .seconds(600)
        }) { api, _ in
            let port = try #require(api.base.port)
            // The client keeps its sending side open: only the server can end the connection.
            let (answer, closed) = await LoadTests.blocking { () -> (String, Bool) in
                guard let fd = LoadTests.connect(port: port) else { return ("", false) }
                defer { close(fd) }
                let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
                guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else { return ("", false) }
                return Self.readUntilClosed(fd, within: .seconds(120))
            }
            #expect(Self.statuses(answer) == ["200"], "\(answer.prefix(600))")
            #expect(closed, "the server kept the connection open after answering Connection: close")
            // Every answer carries a Date header (Hummingbird's did).
            #expect(answer.lowercased().contains("\r\ndate: "))
            #expect(try await api.send("GET", "/healthz").status == 200)
        }
    }
    /// A request that starts arriving while the one before it on the connection is answered, and never ends, is
    /// timed out as a begun request: 408 once the answer is out and the timeout has passed, not a silent close as
    /// for an idle connection. (The socket is read while a request is answered: what came then counts.)
    @Test func aRequestBegunWhileTheOneBeforeIsAnsweredGets408() async throws {
        // The list waits on the lock until it is released: not with the default 2 s lock timeout, which ran out once
        // under make test's load before the test had seen it wait (it then waited 30 s for a waiting session).
        // The request timeout is 3 s, not 1: the list's own headers must arrive within it, from the connection's start,
        // and under make test's load (the server shares its process with 60 suites) once they did not (CI of stop 51:
        // no session waited on the lock); 10 s since issue 56 (a test must not bet on the machine's speed).
        try await TestDatabase.withAPI(configure: {
            $0.requestTimeout = .seconds(10)
            $0.timeouts = RequestTimeouts(statement: .seconds(25), lock: .seconds(25))
        }) { api, db in
            let port = try #require(api.base.port)
            let device = UUID()
            #expect(try await Self.register(device, on: db) == 201)
            let release = Locked(false)
            let lock = try await db.inAnotherSession(holdingFor: 30, release: release) {
                try $0.executeScript("LOCK TABLE poop_logs IN ACCESS EXCLUSIVE MODE")
            }
            let fd = try #require(await LoadTests.blocking { LoadTests.connect(port: port) })
            defer { close(fd) }
            let list = "GET /v1/logs HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\n\r\n"
            #expect(list.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) } == list.utf8.count)
            // The list waits on the lock: it is being answered while the next request's first bytes arrive. If it never
            // does, what the server answered instead is the failure's message.
            do {
                try await db.waitUntilSessionsWaitOnALock()
            } catch {
                release.withLock { $0 = true }
                let (answer, _) = await LoadTests.blocking { Self.readUntilClosed(fd, within: .seconds(5)) }
                Issue.record("\(error); the server had answered: \(answer.prefix(600))")
                return
            }
            let begun = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "
            #expect(begun.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) } == begun.utf8.count)
            try await Task.sleep(for: .milliseconds(300))
            release.withLock { $0 = true }
            try await lock.value
            let (answer, closed) = await LoadTests.blocking { Self.readUntilClosed(fd, within: .seconds(60)) }
            #expect(Self.statuses(answer) == ["200", "408"], "\(answer.prefix(1200))")
            #expect(answer.contains("request_timeout"))
            #expect(closed, "the connection stayed open after the 408")
        }
    }

    /// A client that stops reading an export is cut off after the request timeout: the export's producer and its
    /// database connection are not held for as long as the client likes. It reads what it had been sent, then the
    /// end of the connection, never the export's end.
    @Test func aClientThatStopsReadingAnExportIsCutOffAfterTheRequestTimeout() async throws {
        // 6 s, not 1 or 3: the timeout also bounds the headers' arrival from the connection's start, and on a loaded
        // machine seconds can pass there (3 s failed the sibling test once, CI of stop 51; issue 56).
        try await TestDatabase.withAPI(configure: { $0.requestTimeout = .seconds(6) }) { api, db in
            let port = try #require(api.base.port)
            let device = UUID()
            #expect(try await Self.register(device, on: db) == 201)
            try await db.seedLogs(deviceKey: device.deviceKey, count: 100_000, notes: true)
            let (answer, ended) = await LoadTests.blocking { () -> (String, Bool) in
                guard let fd = LoadTests.connect(port: port) else { return ("", false) }
                defer { close(fd) }
                let request = Array("GET /v1/export HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\n\r\n".utf8)
                guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else { return ("", false) }
                // Not reading until what has arrived stops growing for 18 s (the export fills the socket's buffers
                // at whatever pace the machine allows): the server's writes have then been stuck for three times
                // its 6 s timeout. Peeking does not read: the window stays closed.
                var queued = 0, since = ContinuousClock.now
                var peek = [UInt8](repeating: 0, count: 32 << 20)
                let patience = ContinuousClock.now + .seconds(150)
                while ContinuousClock.now - since < .seconds(18), ContinuousClock.now < patience {
                    Thread.sleep(forTimeInterval: 0.25)
                    let now = recv(fd, &peek, peek.count, Int32(MSG_PEEK | MSG_DONTWAIT))
                    if now > queued { (queued, since) = (now, .now) }
                }
                var bytes: [UInt8] = [], buffer = [UInt8](repeating: 0, count: 65_536)
                let deadline = ContinuousClock.now + .seconds(60)
                while ContinuousClock.now < deadline {
                    var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    guard poll(&poller, 1, 1_000) == 1 else { continue }
                    let count = recv(fd, &buffer, buffer.count, 0)
                    if count <= 0 { return (String(decoding: bytes, as: UTF8.self), true) }
                    bytes += buffer[0..<count]
                }
                return (String(decoding: bytes, as: UTF8.self), false)
            }
            #expect(ended, "the connection was still open after 60 s")
            #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer.prefix(300))")
            #expect(answer.utf8.count > 100_000, "\(answer.utf8.count) bytes")
            #expect(!answer.hasSuffix("0\r\n\r\n"), "the whole export arrived: the server waited for the client")
            // The server serves on, the export's database connection given back.
            #expect(try await api.send("GET", "/v1/logs?limit=1", device: device).status == 200)
        }
    }
    #endif

    @Test func theDateHeaderIsAnIMFFixdate() {
        #expect(HTTPDate.format(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(1_795_654_923) == "Thu, 26 Nov 2026 01:02:03 GMT")
        #expect(HTTPDate.format(951_782_400) == "Tue, 29 Feb 2000 00:00:00 GMT")
    }
}
