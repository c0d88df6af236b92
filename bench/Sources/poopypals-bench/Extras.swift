import Foundation
import PoopyPalsData
import PostgresClient

/// Scenario 2 at growing table sizes, with the plan PostgreSQL picks under row-level security.
struct ScalingRow: Encodable {
    let rows: Int
    let devices: Int
    let measurement: Measurement
    /// pgbench running the same SQL on the same data, in rounds alternating with ours (median).
    let pgbench: Measurement
    let plan: String
}

enum Scaling {
    /// Devices to spread `rows` logs over so that each has at least 21 (a full page of 20 plus one), so that
    /// every size lists the same number of rows: equal work.
    static func devices(for rows: Int, seeded: Int) -> Int { max(1, min(seeded, rows / 21)) }

    /// Users 1…`count` and their devices 1…`count` (`Scenario.user(n)`, `Scenario.device(n)`); rows already there
    /// are kept. Maintenance path: FORCE is lifted inside this transaction only, so the owner may seed every device.
    static func seedDevices(_ count: Int, on conn: Connection) throws {
        try conn.transaction { conn in
            try conn.executeScript("""
                ALTER TABLE devices NO FORCE ROW LEVEL SECURITY; ALTER TABLE users NO FORCE ROW LEVEL SECURITY;
                ALTER TABLE device_key_map NO FORCE ROW LEVEL SECURITY
                """)
            try conn.execute("""
                INSERT INTO users (id, email) SELECT ('00000000-0000-4000-9000-' || lpad(n::text, 12, '0'))::uuid,
                    'user' || n || '@bench.example' FROM generate_series(1, \(count)) AS n ON CONFLICT DO NOTHING
                """)
            try conn.execute("""
                INSERT INTO devices (key, user_id, model) SELECT poopypals_device_key(('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid),
                    ('00000000-0000-4000-9000-' || lpad(n::text, 12, '0'))::uuid, 'bench' FROM generate_series(1, \(count)) AS n
                ON CONFLICT DO NOTHING
                """)
            // Registration writes the map (sql/0027); seeded devices get their rows here.
            try conn.execute("INSERT INTO device_key_map (key, id, user_id) SELECT d.key, d.id, d.user_id FROM devices d WHERE d.erasing_since IS NULL ON CONFLICT DO NOTHING")
            // The keys and the devices' stored ids as values for pgbench's scripts (`Scenario.pgDevice`,
            // `Scenario.pgStoredID`): fake devices' keys, readable by all (read before FORCE
            // is restored: the owner sees every device only until then).
            try conn.executeScript("""
                CREATE SCHEMA IF NOT EXISTS bench; CREATE TABLE IF NOT EXISTS bench.device_keys (n integer PRIMARY KEY, key uuid NOT NULL, id uuid);
                GRANT USAGE ON SCHEMA bench TO PUBLIC; GRANT SELECT ON bench.device_keys TO PUBLIC
                """)
            try conn.execute("""
                INSERT INTO bench.device_keys SELECT n, d.key, d.id
                FROM generate_series(1, \(count)) AS n
                JOIN devices d ON d.key = poopypals_device_key(('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid)
                ON CONFLICT DO NOTHING
                """)
            try conn.executeScript("""
                ALTER TABLE devices FORCE ROW LEVEL SECURITY; ALTER TABLE users FORCE ROW LEVEL SECURITY;
                ALTER TABLE device_key_map FORCE ROW LEVEL SECURITY
                """)
        }
    }

    /// `seed(rows:devices:pool:)` on a session of its own, closed afterwards.
    static func seed(rows: Int, devices: Int, target: ConnectionConfiguration) async throws {
        let pool = ConnectionPool(configuration: .init(connection: target, maxConnections: 1))
        do {
            try await seed(rows: rows, devices: devices, pool: pool)
        } catch {
            await pool.close()
            throw error
        }
        await pool.close()
    }

    /// Seeds `rows` logs spread over the first `devices` devices (maintenance path: FORCE lifted inside the
    /// transaction).
    static func seed(rows: Int, devices: Int, pool: ConnectionPool) async throws {
        try await pool.withConnection { conn in
            try conn.transaction { conn in
                // The change-numbering trigger is off for the bulk load; the numbers are set as the migration does.
                try conn.executeScript("""
                    ALTER TABLE poop_logs NO FORCE ROW LEVEL SECURITY; ALTER TABLE devices NO FORCE ROW LEVEL SECURITY;
                    ALTER TABLE poop_logs DISABLE TRIGGER USER; TRUNCATE poop_logs, poop_log_tombstones
                    """)
                try conn.execute("""
                    INSERT INTO poop_logs (device_id, occurred_at, bristol_type, change_seq)
                    SELECT (SELECT d.id FROM devices d WHERE d.key = poopypals_device_key(('00000000-0000-4000-8000-' || lpad((1 + n % \(devices))::text, 12, '0'))::uuid)),
                           now() - (n || ' seconds')::interval, 1 + n % 7, 1 + n / \(devices)
                    FROM generate_series(1, \(rows)) AS n
                    """)
                try conn.execute("""
                    UPDATE devices d SET change_seq = coalesce((SELECT max(change_seq) FROM poop_logs l WHERE l.device_id = d.id), 0)
                    """)
                try conn.executeScript("""
                    ALTER TABLE poop_logs ENABLE TRIGGER USER;
                    ALTER TABLE poop_logs FORCE ROW LEVEL SECURITY; ALTER TABLE devices FORCE ROW LEVEL SECURITY
                    """)
            }
            try conn.executeScript("VACUUM ANALYZE poop_logs")
        }
    }

    /// EXPLAIN of the list query as a device, through the same request transaction the API uses.
    static func plan(database: Database) async throws -> String {
        try await database.asDevice(Scenario.device(1)) { tx in
            try tx.finalQuery("""
                EXPLAIN (COSTS OFF) SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version FROM poop_logs
                WHERE device_id = (SELECT d.id FROM devices d WHERE d.key = \(Scenario.device(1).key))
                ORDER BY occurred_at DESC, id DESC LIMIT 21
                """).map { try $0.decode(0, as: String.self) }.joined(separator: "\n")
        }
    }
}

/// `wrk` against the real `poopypals serve`, with the server's peak resident memory.
struct HTTPRow: Encodable {
    /// `poopypals` or the Hummingbird + postgres-nio peer.
    let server: String
    let route: String
    let connections: Int
    let requestsPerSecond: Double
    let p50Milliseconds: Double?
    let p99Milliseconds: Double?
    let non2xx: Int
    let serverPeakRSSMiB: Double?
    /// The server process's CPU and context switches per request over the run (every thread; from /proc).
    var serverCPUMicrosecondsPerRequest: Double? = nil
    var serverContextSwitchesPerRequest: Double? = nil
    /// Of those, the switches made while the thread still had work: the core was taken for another process.
    var serverInvoluntarySwitchesPerRequest: Double? = nil
    /// The database server's CPU per request over the run (postmaster and every backend, from /proc): what the
    /// SQL of a request costs PostgreSQL, which shares the cores with the server and wrk.
    var postgresCPUMicrosecondsPerRequest: Double? = nil
    /// The share of the machine's CPU time (all cores) left idle during the run: near 0 when the cores are the
    /// bound, not the server.
    var machineIdleShare: Double? = nil
    /// Ours only: the data layer's rate for the same work (list for GET, create for POST) at the same concurrency,
    /// measured just before this run, in the bench process, while the server idled.
    var dataLayerRequestsPerSecond: Double? = nil
}

enum HTTPLoad {
    static let peerName = "Hummingbird + postgres-nio"

    /// Ours (`poopypals serve --pool-size 16`), then the peer (`peerBinary --serve-peer`, 16 connections), each
    /// under the same `wrk` load.
    /// `reference` measures the data layer doing a route's work at a concurrency (ops/s), just before each of our runs:
    /// on this machine two runs minutes apart differ by more than the ratio's margin.
    static func run(serverBinary: String, peerBinary: String?, databaseURL: String, seconds: Int, devices: Int,
                    reference: (@Sendable (_ route: String, _ connections: Int) async throws -> Double)? = nil) async throws -> [HTTPRow] {
        let port = 18080 + Int.random(in: 0..<1000)
        let postmaster = postmasterProcessID(databaseURL: databaseURL)
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-serve-\(port).log").path
        let environment = ["DATABASE_URL": databaseURL, "AUTH_JWT_SECRET": String(repeating: "b", count: 40),
                           "LOG_LEVEL": "warning"]
        var rows = try await Child.whileRunning(serverBinary, ["serve", "--port", "\(port)", "--pool-size", "16"],
                                                environment: environment, output: log) { server in
            try await load("poopypals", port: port, log: log, server: server, postmaster: postmaster, seconds: seconds, devices: devices,
                           reference: reference)
        }
        if let peerBinary {
            let peerPort = port + 1
            let peerLog = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-peer-\(peerPort).log").path
            rows += try await Child.whileRunning(peerBinary, ["--serve-peer", "\(peerPort)"], environment: ["DATABASE_URL": databaseURL],
                                                 output: peerLog) { server in
                try await load(peerName, port: peerPort, log: peerLog, server: server, postmaster: postmaster, seconds: seconds, devices: devices)
            }
        }
        return rows
    }

    private static func load(_ name: String, port: Int, log: String, server: pid_t, postmaster: pid_t?, seconds: Int, devices: Int,
                             reference: (@Sendable (String, Int) async throws -> Double)? = nil) async throws -> [HTTPRow] {
        for _ in 0..<200 {
            if let text = try? String(contentsOfFile: log, encoding: .utf8), text.contains("listening on") { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let scripts = scripts(devices: devices)
        var rows: [HTTPRow] = []
        // 32 connections: the data layer's highest concurrency, for the ratio; 64: the memory bound's.
        for connections in [32, 64] {
        for (route, script) in scripts {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-wrk-\(UUID().uuidString).lua")
            try script.write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            let dataLayer = try await reference?(route, connections)
            let before = Child.usage(of: server), machineBefore = Child.machineTicks()
            let postgresBefore = postmaster.flatMap { Child.postgresCPUSeconds(postmaster: $0) }
            let (status, output) = try await Child.run(["wrk", "-t", "2", "-c", "\(connections)", "-d", "\(seconds)s", "--latency", "-s", file.path,
                                                 "http://127.0.0.1:\(port)"])
            guard status == 0 else { throw BenchError("wrk exited with \(status)") }
            func value(_ label: String) -> Double? {
                guard let line = output.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(label) })
                else { return nil }
                return milliseconds(String(line.trimmingCharacters(in: .whitespaces).dropFirst(label.count)).trimmingCharacters(in: .whitespaces))
            }
            let rate = output.split(separator: "\n").first { $0.hasPrefix("Requests/sec:") }
                .flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
            let non2xx = output.split(separator: "\n").first { $0.contains("Non-2xx or 3xx responses:") }
                .flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
            let after = Child.usage(of: server), machineAfter = Child.machineTicks()
            let postgresAfter = postmaster.flatMap { Child.postgresCPUSeconds(postmaster: $0) }
            let requests = completedRequests(in: output)
            var row = HTTPRow(server: name, route: route, connections: connections, requestsPerSecond: rate, p50Milliseconds: value("50%"),
                              p99Milliseconds: value("99%"), non2xx: non2xx, serverPeakRSSMiB: Child.peakResidentMiB(of: server))
            row.dataLayerRequestsPerSecond = dataLayer
            if let before, let after, requests > 0 {
                row.serverCPUMicrosecondsPerRequest = (after.cpuSeconds - before.cpuSeconds) * 1e6 / Double(requests)
                row.serverContextSwitchesPerRequest = Double(after.switches - before.switches) / Double(requests)
                row.serverInvoluntarySwitchesPerRequest = Double(after.involuntary - before.involuntary) / Double(requests)
            }
            if let postgresBefore, let postgresAfter, requests > 0 {
                row.postgresCPUMicrosecondsPerRequest = (postgresAfter - postgresBefore) * 1e6 / Double(requests)
            }
            if let machineBefore, let machineAfter, machineAfter.total > machineBefore.total {
                row.machineIdleShare = Double(machineAfter.idle - machineBefore.idle) / Double(machineAfter.total - machineBefore.total)
            }
            rows.append(row)
        }
        }
        return rows
    }

    /// The PostgreSQL server's postmaster, when it runs on this machine: the parent of a backend of ours.
    private static func postmasterProcessID(databaseURL: String) -> pid_t? {
        guard let connection = try? Connection(configuration: ConnectionConfiguration(connectionString: databaseURL)) else { return nil }
        return Child.parentProcessID(of: connection.serverProcessID)
    }

    /// The scenario doing a route's work in the data layer: list 20 for GET, create for POST.
    static func scenarioName(for route: String) -> String {
        route.hasPrefix("GET") ? "list 20 newest logs" : "create log"
    }

    /// The start of every `wrk` script: each of wrk's threads seeds its own generator. Unseeded, LuaJIT starts every
    /// thread's `math.random` from the same state, so `-t2` sent the same device from both threads at about the same
    /// moment: two uploads for one device then wait on each other's row lock (the device's change number), which
    /// no other load here does (the data layer draws with `Int.random`).
    static let seedEachThread = """
        local threads = 0
        function setup(thread)
          threads = threads + 1
          thread:set("thread_number", threads)
        end
        function init(args)
          math.randomseed(thread_number * 7919)
        end

        """

    /// The `wrk` scripts of the two routes: a random seeded device per request.
    static func scripts(devices: Int) -> [(route: String, script: String)] {
        [
            ("GET /v1/logs", seedEachThread + """
                request = function()
                  local id = string.format("00000000-0000-4000-8000-%012d", math.random(1, \(devices)))
                  return wrk.format("GET", "/v1/logs?limit=20", {["X-Device-ID"] = id})
                end
                """),
            ("POST /v1/logs", seedEachThread + """
                request = function()
                  local id = string.format("00000000-0000-4000-8000-%012d", math.random(1, \(devices)))
                  return wrk.format("POST", "/v1/logs", {["X-Device-ID"] = id, ["Content-Type"] = "application/json"},
                    '{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}')
                end
                """),
        ]
    }

    /// A curl config (`curl -K`): one GET per seeded device, in order, on one kept-alive connection, each
    /// answer's status on a line of its own.
    static func everyDeviceOnce(devices: Int, port: Int) -> String {
        (1...max(1, devices)).map { n in
            let digits = String(n)
            return """
                url = "http://127.0.0.1:\(port)/v1/logs?limit=20"
                header = "X-Device-ID: 00000000-0000-4000-8000-\(String(repeating: "0", count: max(0, 12 - digits.count)) + digits)"
                output = "/dev/null"
                write-out = "%{http_code}\\n"
                """
        }.joined(separator: "\nnext\n") + "\n"
    }

    /// The requests `wrk` completed: its line "12345 requests in 8.00s, …" (0 when there is none).
    static func completedRequests(in output: String) -> Int {
        output.split(separator: "\n").first { $0.contains(" requests in ") }
            .flatMap { Int($0.trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "") } ?? 0
    }

    /// wrk prints `812.00us`, `1.23ms` or `2.01s`.
    static func milliseconds(_ text: String) -> Double? {
        if text.hasSuffix("us"), let value = Double(text.dropLast(2)) { return value / 1000 }
        if text.hasSuffix("ms"), let value = Double(text.dropLast(2)) { return value }
        if text.hasSuffix("s"), let value = Double(text.dropLast(1)) { return value * 1000 }
        return nil
    }
}
