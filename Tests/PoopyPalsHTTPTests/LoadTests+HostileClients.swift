import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif
import PoopyPalsData
@testable import PoopyPalsHTTP
import Testing
import TestSupport

/// What one anonymous client can do to everyone else (issue 41): clients that ask and never read must hold no
/// database connection and grow no memory beyond a bound. Run with the load tests, alone.
extension LoadTests {
    #if canImport(Glibc)
    /// Gives every log of the device notes of `length` characters (the trigger renumbers each: fine for a few hundred).
    static func setNotes(_ db: TestDatabase, deviceKey: UUID, length: Int) async throws {
        try await db.withConnection { conn in
            try conn.transaction { conn in
                try conn.query("SELECT set_config('app.device_id', \(deviceKey.uuidString), true)")
                try conn.query("UPDATE poop_logs SET notes = repeat('n', \(length))")
            }
        }
    }

    /// These tests register a hundred devices from one address: more than its registration bucket holds.
    static let manyRegistrations = ["POOPYPALS_REGISTRATION_BURST": "100000"]

    /// Registers each device (`PUT /v1/device`), expecting 201.
    static func register(_ devices: [UUID], base: String) async throws {
        let url = try #require(URL(string: base + "/v1/device"))
        for device in devices {
            let put = try await TestHTTP.send("PUT", url, headers: ["X-Device-ID": device.uuidString], json: "{}", timeout: 30)
            #expect(put.status == 201)
        }
    }

    /// The 99th percentile of `samples` (the largest but one of 100).
    static func p99(_ samples: [Duration]) -> Duration {
        let sorted = samples.sorted()
        guard !sorted.isEmpty else { return .zero }
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * 0.99).rounded(.up)) - 1)]
    }

    /// One `GET /v1/logs?limit=20` per device, each on a connection of its own, one after another: statuses and
    /// latencies.
    static func listEach(_ devices: [UUID], port: Int) async -> [(Int, Duration)] {
        await blocking {
            devices.map { device -> (Int, Duration) in
                let started = ContinuousClock.now
                guard let fd = LoadTests.connect(port: port) else { return (0, .zero) }
                defer { close(fd) }
                let answer = LoadTests.exchange(fd, "GET /v1/logs?limit=20 HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\n\r\n",
                                      waitingAtMost: 10)
                let status = Int(answer.dropFirst("HTTP/1.1 ".count).prefix(3)) ?? 0
                return (status, ContinuousClock.now - started)
            }
        }
    }

    /// 200 connections that each pipeline four requests for the largest sync page and never read: the server used
    /// to build and hold every answer (4 MiB a page with 2 000-character notes), 72 MB → 1.4 GB. Now a page is at
    /// most 512 KiB and a connection takes its next request only once the previous answer has drained.
    @Test func twoHundredPipeliningNonReadersKeepTheServerUnder256MiB() async throws {
        try await TestDatabase.withMigrated { db in
            let (process, base) = try await ServeBinaryTests.serve(db, environment: Self.manyRegistrations)
            defer { process.terminate() }
            let port = try #require(Int(base.split(separator: ":").last ?? ""))
            let device = UUID()
            try await Self.register([device], base: base)
            try await db.seedLogs(deviceKey: device.deviceKey, count: 600)
            try await Self.setNotes(db, deviceKey: device.deviceKey, length: 2000)
            let request = "GET /v1/sync?limit=500 HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\n\r\n"
            let pipelined = String(repeating: request, count: 4)
            let sockets = await Self.blocking { () -> [Int32] in
                (0..<200).compactMap { _ -> Int32? in
                    guard let fd = LoadTests.connect(port: port) else { return nil }
                    _ = pipelined.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                    return fd
                }
            }
            defer { for fd in sockets { close(fd) } }
            #expect(sockets.count == 200)
            let before = try Self.memory(of: process.processIdentifier)
            var peak = before.resident
            // 20 s of sampling (the request timeout, 30 s, would end the stalled connections after that).
            for _ in 0..<80 {
                try await Task.sleep(for: .milliseconds(250))
                peak = max(peak, try Self.memory(of: process.processIdentifier).resident)
            }
            print("200 non-reading pipeliners: server RSS \(before.resident / 1024) MiB at start, peak \(peak / 1024) MiB")
            #expect(peak < 256 * 1024, "the server's RSS reached \(peak / 1024) MiB")
            // And the server still answers everyone else.
            #expect(try await TestHTTP.send("GET", try #require(URL(string: base + "/healthz")), timeout: 10).status == 200)
        }
    }

    /// Twelve connections that ask for a big export and never read, and one that reads 4 KiB every 0.25 s: each
    /// export used to hold a pooled connection in an open transaction for as long as its reader took, and every
    /// other device's request was 503 `busy`. Now the export is read into a spool and committed before it is sent,
    /// one at a time per device: 100 other devices are all answered, their p99 at most twice what it was before (or 250 ms).
    @Test func nonReadingExportsLeaveEveryOtherDeviceServed() async throws {
        try await TestDatabase.withMigrated { db in
            let (process, base) = try await ServeBinaryTests.serve(db, environment: Self.manyRegistrations)
            defer { process.terminate() }
            let port = try #require(Int(base.split(separator: ":").last ?? ""))
            let big = UUID()
            let others = (0..<100).map { _ in UUID() }
            try await Self.register([big] + others, base: base)
            try await db.seedLogs(deviceKey: big.deviceKey, count: 20_000, notes: true)
            let normal = await Self.listEach(others, port: port)
            #expect(normal.allSatisfy { $0.0 == 200 })

            let export = "GET /v1/export HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(big.uuidString)\r\n\r\n"
            let nonReaders = await Self.blocking { () -> [Int32] in
                (0..<12).compactMap { _ -> Int32? in
                    guard let fd = LoadTests.connect(port: port) else { return nil }
                    var small: Int32 = 4096  // a small window: the server's writes stall sooner
                    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
                    _ = export.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                    return fd
                }
            }
            defer { for fd in nonReaders { close(fd) } }
            #expect(nonReaders.count == 12)
            let stop = Locked(false)
            let trickler = Task.detached {
                await Self.blocking {
                    guard let fd = LoadTests.connect(port: port) else { return }
                    defer { close(fd) }
                    _ = export.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    for _ in 0..<400 where !stop.value {  // 100 s at most
                        if recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT)) == 0 { return }
                        usleep(250_000)
                    }
                }
            }
            try await Task.sleep(for: .seconds(2))
            let during = await Self.listEach(others, port: port)
            stop.withLock { $0 = true }
            await trickler.value
            let failed = during.filter { $0.0 != 200 }.map(\.0)
            #expect(failed.isEmpty, "\(failed.count) of 100 other devices not answered 200: \(failed.prefix(10))")
            let (before, after) = (Self.p99(normal.map(\.1)), Self.p99(during.map(\.1)))
            print("100 other devices' GET /v1/logs: p99 \(before) before, \(after) with 12 non-reading exports and a trickling reader")
            // Twice the normal p99, or 250 ms: on a quiet machine the normal p99 is a few ms, and the debug build's
            // clients share the two cores with the load; the defect this guards against gave a 2 s median.
            #expect(after <= max(before * 2, .milliseconds(250)), "p99 \(after) against \(before) before")
        }
    }

    /// Sixteen clients pushing 500 operations at a time to one device, without pause: each push waited for the
    /// device's row lock while holding a pooled connection, and other devices' requests queued behind them (median
    /// 2 s). Now at most two of a device's requests hold connections; the rest wait without one, or get 429
    /// `device_busy`. 100 other devices are all answered, their p99 at most twice what it was before (or 250 ms).
    @Test func oneDevicesConcurrentPushesLeaveEveryOtherDeviceServed() async throws {
        try await TestDatabase.withMigrated { db in
            let (process, base) = try await ServeBinaryTests.serve(db, environment: Self.manyRegistrations)
            defer { process.terminate() }
            let port = try #require(Int(base.split(separator: ":").last ?? ""))
            let busy = UUID()
            let others = (0..<100).map { _ in UUID() }
            try await Self.register([busy] + others, base: base)
            let normal = await Self.listEach(others, port: port)
            #expect(normal.allSatisfy { $0.0 == 200 })
            let url = try #require(URL(string: base + "/v1/sync"))
            let stop = Locked(false)
            let statuses = Locked<[Int]>([])
            let pushers = (0..<16).map { _ in
                Task.detached {
                    for _ in 0..<100 where !stop.value {
                        let operations = (0..<500).map { n in
                            #"{"op":"upsert","log":{"id":"\#(UUID().uuidString)","occurredAt":"2024-01-01T00:00:00Z","bristolType":\#(1 + n % 7)}}"#
                        }
                        let body = #"{"operations":[\#(operations.joined(separator: ","))]}"#
                        let status = (try? await TestHTTP.send("POST", url, headers: ["X-Device-ID": busy.uuidString],
                                                               json: body, timeout: 30).status) ?? 0
                        statuses.withLock { $0.append(status) }
                    }
                }
            }
            try await Task.sleep(for: .seconds(2))
            let during = await Self.listEach(others, port: port)
            stop.withLock { $0 = true }
            for pusher in pushers { await pusher.value }
            let failed = during.filter { $0.0 != 200 }.map(\.0)
            #expect(failed.isEmpty, "\(failed.count) of 100 other devices not answered 200: \(failed.prefix(10))")
            let pushed = statuses.value
            let unexpected = pushed.filter { $0 != 200 && $0 != 429 }
            #expect(unexpected.isEmpty, "pushes answered \(Set(unexpected))")
            #expect(pushed.contains(200))
            let (before, after) = (Self.p99(normal.map(\.1)), Self.p99(during.map(\.1)))
            print("100 other devices' GET /v1/logs: p99 \(before) before, \(after) during 16 concurrent pushes to one device "
                  + "(\(pushed.filter { $0 == 200 }.count) pushes 200, \(pushed.filter { $0 == 429 }.count) 429)")
            #expect(after <= max(before * 2, .milliseconds(250)), "p99 \(after) against \(before) before")
        }
    }

    /// One address may hold `POOPYPALS_MAX_CONNECTIONS_PER_ADDRESS` connections; one more is closed at once, before
    /// anything is read, and a slot freed is taken again. Nothing limited it: one client could hold every one of the
    /// process's 8 192.
    @Test func oneAddressHoldsAtMostItsShareOfConnections() async throws {
        try await TestDatabase.withMigrated { db in
            let (process, base) = try await ServeBinaryTests.serve(db, environment: ["POOPYPALS_MAX_CONNECTIONS_PER_ADDRESS": "8"])
            defer { process.terminate() }
            let port = try #require(Int(base.split(separator: ":").last ?? ""))
            let health = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            let held = await Self.blocking { () -> [Int32] in (0..<8).compactMap { _ in LoadTests.connect(port: port) } }
            #expect(held.count == 8)
            var open = held
            defer { for fd in open { close(fd) } }
            for fd in held {
                let answer = await Self.blocking { LoadTests.exchange(fd, health) }
                #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer.prefix(80))")
            }
            let extra = try #require(await Self.blocking { LoadTests.connect(port: port) })
            defer { close(extra) }
            #expect(await Self.blocking { LoadTests.closedByServer(extra, within: 30) }, "a ninth connection stayed open")
            close(open.removeFirst())
            // The server frees the slot when it sees the close: tried until it has (not after a fixed 300 ms a
            // loaded machine may not give it, issue 56), within 30 s.
            let deadline = ContinuousClock.now + .seconds(30)
            var answer = ""
            while !answer.hasPrefix("HTTP/1.1 200"), ContinuousClock.now < deadline {
                answer = await Self.blocking { () -> String in
                    guard let again = LoadTests.connect(port: port) else { return "" }
                    defer { close(again) }
                    return LoadTests.exchange(again, health)
                }
                if !answer.hasPrefix("HTTP/1.1 200") { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(answer.hasPrefix("HTTP/1.1 200"), "a freed slot was not taken again: \(answer.prefix(80))")
        }
    }
    #endif
}
