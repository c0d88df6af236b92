import Foundation
import Logging
import PostgresNIO

/// The peer a Swift developer would otherwise pick: vapor/postgres-nio's `PostgresClient`, used as its README
/// shows (`run()` in a task, `withTransaction`, string interpolation for binds), doing each scenario's request
/// transaction — the same statements with the same values — closed loop at the same concurrency. Each statement
/// is its own round trip there (BEGIN, the context, the statement, COMMIT), where we pipeline them into one.
struct NIOPeer: Sendable {
    let client: PostgresNIO.PostgresClient
    let logger = Logger(label: "bench.postgres-nio")

    /// - Throws: for a connection string that is not a `postgresql://user:password@host:port/database` URL.
    static func configuration(url: String, maximumConnections: Int) throws -> PostgresNIO.PostgresClient.Configuration {
        guard let components = URLComponents(string: url), let user = components.user, let host = components.host
        else { throw BenchError("the postgres-nio peer needs a postgresql://user:password@host:port/db URL") }
        var configuration = PostgresNIO.PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password,
            database: String(components.path.dropFirst()), tls: .disable)
        configuration.options.maximumConnections = maximumConnections
        configuration.options.minimumConnections = 0
        return configuration
    }

    /// The first statement of every request: the role, the key and the two time limits a developer would set (ours and
    /// pgbench's, `Scenario.context`, also set the idle limit, the quotas and the write bucket, and check a kept id).
    func context(_ conn: PostgresConnection, key: String) async throws {
        try await conn.query("""
            SELECT set_config('role', poopypals_service_role(), true), set_config('app.device_id', \(key), true), \
            set_config('statement_timeout', '5000', true), set_config('lock_timeout', '2000', true)
            """, logger: logger)
    }

    /// Runs one scenario's request for seeded device / user `n` with the device key `key` (derived on the
    /// client, as ours is).
    func request(_ scenario: String, key: UUID, user: UUID, email: String) async throws {
        let keyText = key.uuidString.lowercased()
        try await client.withTransaction(logger: logger) { conn in
            try await context(conn, key: keyText)
            let rows: PostgresRowSequence
            switch scenario {
            case "list 20 newest logs":
                rows = try await conn.query("SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version FROM poop_logs WHERE device_id = (SELECT d.id FROM devices d WHERE d.key = \(key)) ORDER BY occurred_at DESC, id DESC LIMIT 21", logger: logger)
            case "ensureProfile (existing user)":
                rows = try await conn.query("SELECT * FROM poopypals_ensure_profile(\(user), \(email), false, NULL, false, NULL)", logger: logger)
            case "register existing device":
                rows = try await conn.query("""
                    SELECT outcome, user_id, model, os_version, app_version, build_number, is_simulator, created_at, last_seen_at \
                    FROM poopypals_register_device(\("iPhone15,2"), \("18.1"), \("1.4.0"), \("140"), false, true, \(""), 30, \(1.0 / 30))
                    """, logger: logger)
            case "create log":
                // One statement, as a developer would write it on PostgreSQL; ours sends the insert and the read-back as
                // two statements in one round trip (PoopLogRepository.create: Citus runs this CTE in steps).
                let id = UUID()
                rows = try await conn.query("""
                    WITH device AS (SELECT d.id FROM devices d WHERE d.key = \(key)), \
                    inserted AS (INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) \
                    VALUES (\(id), (SELECT id FROM device), \(Date()), 4, NULL) ON CONFLICT (device_id, id) DO NOTHING \
                    RETURNING id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version) \
                    SELECT *, true AS created FROM inserted UNION ALL SELECT id, occurred_at, bristol_type, notes, created_at, \
                    updated_at, change_seq AS version, false FROM poop_logs WHERE device_id = (SELECT id FROM device) AND id = \(id) \
                    AND NOT EXISTS (SELECT FROM inserted)
                    """, logger: logger)
            case "sync pull (first page of 20)":
                let after: Int64 = 0  // bound, as ours is
                rows = try await conn.query("""
                    WITH device AS (SELECT id, purged_through_seq FROM devices WHERE key = \(key)), changes AS ((SELECT 'upsert'::text AS op, \
                    l.change_seq AS seq, l.id, l.occurred_at, l.bristol_type, l.notes, l.created_at, l.updated_at, \
                    l.change_seq AS version FROM poop_logs l WHERE l.device_id = (SELECT id FROM device) AND l.change_seq > \(after) \
                    ORDER BY l.change_seq LIMIT 21) UNION ALL \
                    (SELECT 'delete', t.change_seq, t.id, NULL, NULL, NULL, NULL, NULL, NULL FROM poop_log_tombstones t \
                    WHERE t.device_id = (SELECT id FROM device) AND t.change_seq > \(after) ORDER BY t.change_seq LIMIT 21) ORDER BY 2 LIMIT 21) \
                    SELECT (SELECT purged_through_seq FROM device) AS purged, c.* FROM (SELECT 1) AS one LEFT JOIN changes c ON true ORDER BY c.seq
                    """, logger: logger)
            case "sync push (one new log)":
                let id = UUID()
                for try await _ in try await conn.query("SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version FROM poop_logs WHERE device_id = (SELECT d.id FROM devices d WHERE d.key = \(key)) AND id = \(id) FOR UPDATE", logger: logger) {}
                rows = try await conn.query("INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) VALUES (\(id), (SELECT d.id FROM devices d WHERE d.key = \(key)), \(Date()), 4, NULL) ON CONFLICT (device_id, id) DO NOTHING RETURNING id", logger: logger)
            default:
                throw BenchError("no postgres-nio request for \(scenario)")
            }
            for try await _ in rows {}
        }
    }
}

extension NIOPeer {
    /// One timed run of the peer, in a process of its own (the bench binary with `--nio-peer-run`), which ends with
    /// the run. In the bench's own process the peer's leftovers counted as ours: postgres-nio arms a timer per
    /// request, and a cancelled sleep's timer still fires at its deadline, so during our next runs the dispatch
    /// timer thread and the cooperative threads woke thousands of times a second (`perf record -e context-switches`
    /// on the bench; a probe on `swift_dispatchEnqueueWithDeadline` counted about 3 000 timers armed per second in
    /// the peer's runs, 1 per second in ours). The scenarios measured after a peer run showed 1.7–3.0 context
    /// switches per request instead of 1.0, and 1.5–2× the CPU; run alone, or with `--skip-peer`, 1.0.
    /// - Throws: when the child fails or prints no measurement.
    static func measureInChild(binary: String, scenario: String, url: String, concurrency: Int, seconds: Int,
                               devices: Int) async throws -> Measurement {
        let (status, output) = try await Child.run(
            [binary, "--nio-peer-run", scenario, "--database-url", url, "--concurrency", "\(concurrency)",
             "--seconds", "\(seconds)", "--devices", "\(devices)"],
            environment: ["LOG_LEVEL": "warning"])
        guard status == 0, let line = output.split(separator: "\n").last,
              let measurement = try? JSONDecoder().decode(Measurement.self, from: Data(line.utf8))
        else { throw BenchError("the postgres-nio peer's run of \(scenario) exited with status \(status) and no measurement") }
        return measurement
    }

    /// The child's side: warm up (open every connection), one timed run, its measurement as one line of JSON.
    static func runChild(scenario: String, url: String, concurrency: Int, seconds: Int, devices: Int) async throws {
        let peer = NIOPeer(client: PostgresNIO.PostgresClient(configuration: try configuration(url: url, maximumConnections: concurrency),
                                                              backgroundLogger: Logger(label: "bench.postgres-nio")))
        let running = Task { await peer.client.run() }
        defer { running.cancel() }
        let request = { @Sendable (n: Int) async throws in
            try await peer.request(scenario, key: Scenario.device(n).key, user: Scenario.user(n), email: Scenario.email(n))
        }
        _ = try await runLoad(concurrency: concurrency, duration: .milliseconds(500)) { worker in
            try await request(1 + (worker * 7919) % devices)
        }
        let measurement = try await runLoad(concurrency: concurrency, duration: .seconds(seconds)) { _ in
            try await request(Int.random(in: 1...devices))
        }
        FileHandle.standardOutput.write(try JSONEncoder().encode(measurement) + Data("\n".utf8))
    }
}
