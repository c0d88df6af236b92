import Foundation
import PoopyPalsData
import PostgresClient

/// One read-scale run: `wrk` through the release `poopypals serve` on the local cluster (scripts/cluster.sh), with
/// or without the standby as its read pool.
struct ReadScaleRow: Encodable {
    /// "primary only", "primary as read pool" or "standby as read pool".
    let setup: String
    /// "GET /v1/logs" or "POST /v1/logs, then GET /v1/logs with its token".
    let workload: String
    let connections: Int
    let requestsPerSecond: Double
    let p99Milliseconds: Double?
    let non2xx: Int
    /// GET /v1/logs answered 200 during the run (from serve's /metrics).
    let reads: Int
    /// Of those, the ones the read pool sent to the primary (`poopypals_db_reads_on_primary_total`).
    let readsOnPrimary: Int
    /// The fraction of reads the standby served: 0 without a read pool.
    var standbyShare: Double { reads > 0 && setup != ReadScale.primaryOnly ? 1 - Double(readsOnPrimary) / Double(reads) : 0 }
}

/// `make bench`'s read-scale scenario (issue 26): the same `GET /v1/logs` load on the primary alone and with the
/// synchronous standby as the read pool, then writes each followed by a read that sends the write's
/// `Consistency-Token` back, and the fraction of reads the standby served. On one machine both nodes share its
/// cores: what this shows is the share the standby takes and what routing costs, not the gain of a second machine.
enum ReadScale {
    static let primaryOnly = "primary only"
    static let primaryAsReadPool = "primary as read pool"
    static let withStandby = "standby as read pool"

    /// Seeds the cluster's database as the bench's own (`devices` devices of 20 logs), waits until the standby has
    /// replayed it, then runs both setups.
    static func run(serverBinary: String, clusterURL: String, standbyURL: String, seconds: Int, devices: Int) async throws -> [ReadScaleRow] {
        let primary = ConnectionConfiguration.resolve(databaseURL: clusterURL, environment: [:])
        try await seed(primary, devices: devices)
        try await waitForReplay(primary: primary, standby: ConnectionConfiguration.resolve(databaseURL: standbyURL, environment: [:]))
        var rows: [ReadScaleRow] = []
        // The primary as its own read pool separates what routing to a second pool costs from what the standby does.
        for (setup, read) in [(primaryOnly, nil), (primaryAsReadPool, clusterURL), (withStandby, standbyURL)] as [(String, String?)] {
            rows += try await load(setup, serverBinary: serverBinary, url: clusterURL, readURL: read, seconds: seconds, devices: devices)
        }
        return rows
    }

    /// The same users, devices and logs as the bench database (idempotent: a second run finds them).
    private static func seed(_ target: ConnectionConfiguration, devices count: Int) async throws {
        let pool = ConnectionPool(configuration: .init(connection: target, maxConnections: 1))
        do {
            try await pool.withConnection { conn in try Scaling.seedDevices(count, on: conn) }
            try await Scaling.seed(rows: 20 * count, devices: count, pool: pool)
        } catch {
            await pool.close()
            throw error
        }
        await pool.close()
    }

    /// Until the standby has replayed the primary's WAL as it is now (30 s at most).
    private static func waitForReplay(primary: ConnectionConfiguration, standby: ConnectionConfiguration) async throws {
        let primaryPool = ConnectionPool(configuration: .init(connection: primary, maxConnections: 1))
        let standbyPool = ConnectionPool(configuration: .init(connection: standby, maxConnections: 1))
        defer { Task { await primaryPool.close(); await standbyPool.close() } }
        let target = try await primaryPool.withConnection { try $0.query("SELECT pg_current_wal_lsn()::text").first?.decode(0, as: String.self) }
        guard let target, let goal = ConsistencyToken(lsn: target) else { throw BenchError("the primary did not report its WAL position") }
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let replayed = try await standbyPool.withConnection {
                try $0.query("SELECT pg_last_wal_replay_lsn()::text").first?.decode(0, as: String?.self)
            }
            if let replayed, let position = ConsistencyToken(lsn: replayed), position >= goal { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw BenchError("the standby did not replay the seed within 30 s")
    }

    private static func load(_ setup: String, serverBinary: String, url: String, readURL: String?, seconds: Int,
                             devices: Int) async throws -> [ReadScaleRow] {
        let port = 19080 + Int.random(in: 0..<1000)
        let metricsPort = port + 1000
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-readscale-\(port).log").path
        var environment = ["DATABASE_URL": url, "AUTH_JWT_SECRET": String(repeating: "b", count: 40), "LOG_LEVEL": "warning"]
        if let readURL { environment["POOPYPALS_READ_DATABASE_URL"] = readURL }
        return try await Child.whileRunning(serverBinary, ["serve", "--port", "\(port)", "--metrics-port", "\(metricsPort)", "--pool-size", "16"],
                                            environment: environment, output: log) { _ in
            for _ in 0..<200 {
                if let text = try? String(contentsOfFile: log, encoding: .utf8), text.contains("listening on") { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            let device = #"string.format("00000000-0000-4000-8000-%012d", math.random(1, \#(devices)))"#
            let workloads = [
                ("GET /v1/logs", HTTPLoad.seedEachThread + """
                    request = function()
                      return wrk.format("GET", "/v1/logs?limit=20", {["X-Device-ID"] = \(device)})
                    end
                    """),
                // Each connection alternates: a write, then a read with the token of the latest write its thread saw.
                ("POST /v1/logs, then GET /v1/logs with its token", HTTPLoad.seedEachThread + """
                    local token = nil
                    local writes = true
                    request = function()
                      writes = not writes
                      if writes then
                        return wrk.format("POST", "/v1/logs", {["X-Device-ID"] = \(device), ["Content-Type"] = "application/json"},
                          '{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}')
                      end
                      -- Without a read pool, writes answer no token: the read goes without one.
                      local headers = {["X-Device-ID"] = \(device)}
                      if token ~= nil then headers["Consistency-Token"] = token end
                      return wrk.format("GET", "/v1/logs?limit=20", headers)
                    end
                    response = function(status, headers, body)
                      if headers["Consistency-Token"] ~= nil then token = headers["Consistency-Token"] end
                    end
                    """),
            ]
            // Warm up: the pool's connections opened and the statements prepared before anything is measured.
            _ = try await Child.run(["wrk", "-t", "2", "-c", "32", "-d", "2s", "http://127.0.0.1:\(port)/healthz"])
            let warm = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-wrk-\(UUID().uuidString).lua")
            try workloads[0].1.write(to: warm, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: warm) }
            _ = try await Child.run(["wrk", "-t", "2", "-c", "32", "-d", "2s", "-s", warm.path, "http://127.0.0.1:\(port)"])
            var rows: [ReadScaleRow] = []
            for (workload, script) in workloads {
                let file = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-wrk-\(UUID().uuidString).lua")
                try script.write(to: file, atomically: true, encoding: .utf8)
                defer { try? FileManager.default.removeItem(at: file) }
                let before = try await counters(metricsPort: metricsPort)
                let (status, output) = try await Child.run(["wrk", "-t", "2", "-c", "32", "-d", "\(seconds)s", "--latency", "-s", file.path,
                                                            "http://127.0.0.1:\(port)"])
                guard status == 0 else { throw BenchError("wrk exited with \(status)") }
                let after = try await counters(metricsPort: metricsPort)
                let lines = output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
                let rate = lines.first { $0.hasPrefix("Requests/sec:") }.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
                let non2xx = lines.first { $0.hasPrefix("Non-2xx or 3xx responses:") }.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
                let p99 = lines.first { $0.hasPrefix("99%") }.flatMap { HTTPLoad.milliseconds(String($0.dropFirst(3)).trimmingCharacters(in: .whitespaces)) }
                let row = ReadScaleRow(setup: setup, workload: workload, connections: 32, requestsPerSecond: rate, p99Milliseconds: p99,
                                       non2xx: non2xx, reads: after.reads - before.reads, readsOnPrimary: after.onPrimary - before.onPrimary)
                print(String(format: "read scale, %@, %@: %.0f req/s, read pool served %.0f%% of %d reads", setup, workload,
                             rate, row.standbyShare * 100, row.reads))
                rows.append(row)
            }
            return rows
        }
    }

    /// GET /v1/logs answered 200, and reads sent to the primary, from serve's /metrics.
    private static func counters(metricsPort: Int) async throws -> (reads: Int, onPrimary: Int) {
        let (status, text) = try await Child.run(["curl", "-sf", "--max-time", "10", "http://127.0.0.1:\(metricsPort)/metrics"])
        guard status == 0 else { throw BenchError("GET /metrics failed (curl exit \(status))") }
        func sum(_ name: String, where matches: (Substring) -> Bool) -> Int {
            text.split(separator: "\n").filter { $0.hasPrefix(name) && matches($0) }
                .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0) { $0 + Int($1) }
        }
        return (sum("poopypals_http_requests_total{") { $0.contains(#"method="GET""#) && $0.contains(#"route="/v1/logs""#) && $0.contains(#"status="200""#) },
                sum("poopypals_db_reads_on_primary_total") { _ in true })
    }
}
