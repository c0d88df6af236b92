import Foundation
import PoopyPalsData
import PostgresClient

/// The "database floor" (issue 44): each request transaction the service sends, run by pgbench as the service sends
/// it (the context statement, row-level security, the triggers, the foreign key), against its floor: the same rows
/// through the same indexes of bare copies of the tables (schema `floor`: `LIKE … INCLUDING ALL`, so the same
/// columns, checks and indexes, and no policy, trigger or foreign key), with no context statement. Both find the
/// device by its key (an index probe any design pays). For each: PostgreSQL's CPU per transaction (the postmaster
/// and all its children, from /proc, as the HTTP table measures it), WAL bytes per transaction, and the ratio.
enum DatabaseFloor {
    struct Pair {
        let name: String
        /// Rows each transaction writes (for per-row figures of the pushes).
        let rows: Int
        let ours: String
        let floor: String
        /// Clients and transactions per client when the run is counted (deletes consume seeded rows), else timed.
        var transactions: Int? = nil
        var clients = 8
    }

    struct Row: Encodable {
        let transaction: String
        let rows: Int
        let oursMicroseconds: Double
        let floorMicroseconds: Double
        let oursTPS: Double
        let floorTPS: Double
        let oursWALBytes: Double
        let floorWALBytes: Double
        var ratio: Double { floorMicroseconds > 0 ? oursMicroseconds / floorMicroseconds : 0 }
    }

    /// Seeded delete targets: per client, `deletesPerRun` rows for each round.
    static let deletesPerRun = 1500

    /// The pairs, as the repositories send them (PoopLogRepository, SyncRepository, UserRepository, DeviceRepository).
    static func pairs(devices: Int) -> [Pair] {
        let key = Scenario.pgDevice
        let columns = "id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version"
        // Ours: as the service sends it for a device whose id it keeps (`Scenario.context`, the stored id bound);
        // requests of one round trip (reads and writes) without BEGIN and COMMIT.
        func ours(_ statement: String, checksKeptID: Bool = true) -> String {
            Scenario.pipelined(devices, statement, checksKeptID: checksKeptID)
        }
        func oursRead(_ statement: String, checksKeptID: Bool = true) -> String {
            Scenario.read(devices, statement, checksKeptID: checksKeptID)
        }
        let stored = Scenario.pgStoredID
        // The floor: the statement alone (autocommit), as a bare client would send it.
        func bare(_ statement: String) -> String { "\\set n random(1, \(devices))\n\(statement)" }
        func id(_ table: String) -> String { "(SELECT d.id FROM \(table) d WHERE d.key = \(key))" }
        // Device n's log for get and patch, seeded with a fixed id.
        let fixed = Scenario.pgFixedLog
        // A delete target: client c's k-th (k counts on across rounds: -D k=…), of device 1 + m % devices.
        let deleteTarget = "('00000000-0000-4000-b000-' || lpad(:m::text, 12, '0'))::uuid"
        let counter = "\\set k :k + 1\n\\set m :client_id * 1000000 + :k\n\\set n 1 + :m % \(devices)\n"
        func push(_ count: Int, floor: Bool) -> String {
            let logs = floor ? "floor.poop_logs" : "poop_logs", deviceID = floor ? id("floor.devices") : stored
            var script = "\\set n random(1, \(devices))\n\(Scenario.pgNewLogs)\nBEGIN;\n"
            if !floor { script += Scenario.context() + "\n" }
            for op in 0..<count {
                let log = Scenario.pgNewLog(op)
                script += "SELECT \(columns) FROM \(logs) WHERE device_id = \(deviceID) AND id = \(log) FOR UPDATE;\n"
                script += "INSERT INTO \(logs) (id, device_id, occurred_at, bristol_type, notes\(floor ? ", change_seq" : "")) VALUES (\(log), \(deviceID), now(), 4, NULL\(floor ? ", 0" : "")) ON CONFLICT (device_id, id) DO NOTHING RETURNING id;\n"
            }
            return script + "COMMIT;\n"
        }
        let pullQuery = { (devicesTable: String, logs: String, tombstones: String) in
            "WITH device AS (SELECT id, purged_through_seq FROM \(devicesTable) WHERE key = \(key)), changes AS ((SELECT 'upsert'::text AS op, l.change_seq AS seq, l.id, l.occurred_at, l.bristol_type, l.notes, l.created_at, l.updated_at, l.change_seq AS version FROM \(logs) l WHERE l.device_id = (SELECT id FROM device) AND l.change_seq > :after ORDER BY l.change_seq LIMIT 21) UNION ALL (SELECT 'delete', t.change_seq, t.id, NULL, NULL, NULL, NULL, NULL, NULL FROM \(tombstones) t WHERE t.device_id = (SELECT id FROM device) AND t.change_seq > :after ORDER BY t.change_seq LIMIT 21) ORDER BY 2 LIMIT 21) SELECT (SELECT purged_through_seq FROM device) AS purged, c.* FROM (SELECT 1) AS one LEFT JOIN changes c ON true ORDER BY c.seq;"
        }
        let patch = { (logs: String, device: String) in
            "UPDATE \(logs) SET occurred_at = COALESCE(NULL::timestamptz, occurred_at), bristol_type = COALESCE(:b::smallint, bristol_type), notes = CASE WHEN false THEN NULL::text ELSE notes END, updated_at = now() WHERE device_id = \(device) AND id = \(fixed) RETURNING \(columns);"
        }
        let register = { (devicesTable: String) in
            "INSERT INTO \(devicesTable) (key, model, os_version, app_version, build_number, is_simulator) VALUES (\(key)::uuid, 'iPhone15,2', '18.1', '1.4.0', '140', false) ON CONFLICT (key) DO UPDATE SET model = EXCLUDED.model, os_version = EXCLUDED.os_version, app_version = EXCLUDED.app_version, build_number = EXCLUDED.build_number, is_simulator = EXCLUDED.is_simulator, last_seen_at = now() WHERE \(devicesTable).erasing_since IS NULL RETURNING user_id, model, os_version, app_version, build_number, is_simulator, created_at, last_seen_at, (xmax = 0) AS inserted;"
        }
        return [
            Pair(name: "list 20", rows: 0,
                 ours: oursRead(Scenario.keptIDRead(PoopLogRepository.keptIDReadStatements.list), checksKeptID: false),
                 floor: bare("SELECT \(columns) FROM floor.poop_logs WHERE device_id = \(id("floor.devices")) ORDER BY occurred_at DESC, id DESC LIMIT 21;")),
            Pair(name: "get", rows: 0,
                 ours: oursRead(Scenario.keptIDRead(PoopLogRepository.keptIDReadStatements.get, log: fixed), checksKeptID: false),
                 floor: bare("SELECT \(columns) FROM floor.poop_logs WHERE device_id = \(id("floor.devices")) AND id = \(fixed);")),
            Pair(name: "create", rows: 1,
                 ours: ours(Scenario.pgCreate, checksKeptID: false),
                 floor: bare("INSERT INTO floor.poop_logs (id, device_id, occurred_at, bristol_type, notes, change_seq) VALUES (gen_random_uuid(), \(id("floor.devices")), now(), 4, NULL, 0) ON CONFLICT (device_id, id) DO NOTHING RETURNING \(columns);")),
            Pair(name: "patch", rows: 1,
                 ours: "\\set b random(1, 7)\n" + ours(patch("poop_logs", stored)),
                 floor: "\\set b random(1, 7)\n" + bare(patch("floor.poop_logs", id("floor.devices")))),
            Pair(name: "delete", rows: 1,
                 ours: counter + "\\startpipeline\n\(Scenario.context())\nDELETE FROM poop_logs WHERE device_id = \(stored) AND id = \(deleteTarget);\n\\endpipeline\n",
                 floor: counter + "DELETE FROM floor.poop_logs WHERE device_id = \(id("floor.devices")) AND id = \(deleteTarget);\n",
                 transactions: deletesPerRun),
            Pair(name: "ensureProfile (existing)", rows: 0,
                 ours: ours("SELECT * FROM poopypals_ensure_profile(\(Scenario.pgUser), 'user' || :n || '@bench.example', false, NULL, false, NULL);", checksKeptID: false),
                 floor: bare("SELECT u.id, u.email, u.full_name, u.role, u.date_of_birth, u.created_at, u.updated_at FROM floor.users u WHERE u.id = (SELECT d.user_id FROM floor.devices d WHERE d.key = \(key)) AND u.id = \(Scenario.pgUser) AND u.email = 'user' || :n || '@bench.example';")),
            Pair(name: "register (existing)", rows: 0,
                 ours: ours("SELECT outcome, user_id, model, os_version, app_version, build_number, is_simulator, created_at, last_seen_at FROM poopypals_register_device('iPhone15,2', '18.1', '1.4.0', '140', false, true, '', 30, 0.0333333);", checksKeptID: false),
                 floor: bare(register("floor.devices"))),
            Pair(name: "sync pull (20)", rows: 0,
                 ours: "\\set after 0\n" + oursRead(Scenario.pgPull),
                 floor: "\\set after 0\n" + bare(pullQuery("floor.devices", "floor.poop_logs", "floor.poop_log_tombstones"))),
            Pair(name: "sync push (1)", rows: 1, ours: push(1, floor: false), floor: push(1, floor: true)),
            Pair(name: "sync push (10)", rows: 10, ours: push(10, floor: false), floor: push(10, floor: true)),
            Pair(name: "sync push (500)", rows: 500, ours: push(500, floor: false), floor: push(500, floor: true), clients: 2),
        ]
    }

    /// Copies the seeded tables into schema `floor` (bare) and seeds the logs get, patch and delete use, in both.
    static func prepare(target: ConnectionConfiguration, devices: Int, rounds: Int, clients: Int) async throws {
        let connection = try Connection(configuration: target)
        let deletes = deletesPerRun * rounds
        try connection.transaction { conn in
            try conn.executeScript("""
                DROP SCHEMA IF EXISTS floor CASCADE; CREATE SCHEMA floor;
                ALTER TABLE poop_logs NO FORCE ROW LEVEL SECURITY; ALTER TABLE devices NO FORCE ROW LEVEL SECURITY;
                ALTER TABLE users NO FORCE ROW LEVEL SECURITY; ALTER TABLE poop_log_tombstones NO FORCE ROW LEVEL SECURITY;
                ALTER TABLE poop_logs DISABLE TRIGGER USER;
                DELETE FROM poop_logs WHERE id::text LIKE '00000000-0000-4000-a000-%' OR id::text LIKE '00000000-0000-4000-b000-%';
                """)
            // Device n's fixed log, and the delete targets of every client and round (device 1 + m % devices).
            try conn.execute("""
                INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, change_seq)
                SELECT ('00000000-0000-4000-a000-' || lpad(n::text, 12, '0'))::uuid,
                       (SELECT d.id FROM devices d WHERE d.key = poopypals_device_key(('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid)),
                       now() - interval '1 day', 3, 0
                FROM generate_series(1, \(devices)) AS n
                """)
            try conn.execute("""
                INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, change_seq)
                SELECT ('00000000-0000-4000-b000-' || lpad(m::text, 12, '0'))::uuid,
                       (SELECT d.id FROM devices d WHERE d.key = poopypals_device_key(('00000000-0000-4000-8000-' || lpad((1 + m % \(devices))::text, 12, '0'))::uuid)),
                       now() - interval '2 days', 3, 0
                FROM generate_series(0, \(clients) - 1) AS c, generate_series(1, \(deletes)) AS k, LATERAL (SELECT c * 1000000 + k AS m) AS t
                """)
            // Numbers and counts as the triggers would have left them.
            try conn.executeScript("""
                UPDATE poop_logs l SET change_seq = d.change_seq + s.rn
                FROM (SELECT device_id, id, row_number() OVER (PARTITION BY device_id ORDER BY id) AS rn FROM poop_logs WHERE change_seq = 0) s, devices d
                WHERE l.device_id = s.device_id AND l.id = s.id AND d.id = l.device_id;
                UPDATE devices d SET change_seq = c.top, log_count = c.n
                FROM (SELECT device_id, max(change_seq) AS top, count(*) AS n FROM poop_logs GROUP BY device_id) c WHERE d.id = c.device_id;
                ALTER TABLE poop_logs ENABLE TRIGGER USER;
                CREATE TABLE floor.users (LIKE users INCLUDING ALL);
                CREATE TABLE floor.devices (LIKE devices INCLUDING ALL);
                CREATE TABLE floor.poop_logs (LIKE poop_logs INCLUDING ALL);
                CREATE TABLE floor.poop_log_tombstones (LIKE poop_log_tombstones INCLUDING ALL);
                INSERT INTO floor.users SELECT * FROM users;
                INSERT INTO floor.devices SELECT * FROM devices;
                INSERT INTO floor.poop_logs SELECT * FROM poop_logs;
                INSERT INTO floor.poop_log_tombstones SELECT * FROM poop_log_tombstones;
                ALTER TABLE poop_logs FORCE ROW LEVEL SECURITY; ALTER TABLE devices FORCE ROW LEVEL SECURITY;
                ALTER TABLE users FORCE ROW LEVEL SECURITY; ALTER TABLE poop_log_tombstones FORCE ROW LEVEL SECURITY;
                """)
        }
        // No autovacuum during the runs, on either side: its worker's CPU counts as PostgreSQL's, and landed on
        // whichever run it overlapped (a floor push read 783 µs in one run, 398 in the next).
        for table in ["users", "devices", "poop_logs", "poop_log_tombstones"] {
            try connection.executeScript("ALTER TABLE \(table) SET (autovacuum_enabled = off); ALTER TABLE floor.\(table) SET (autovacuum_enabled = off)")
        }
        try connection.executeScript("VACUUM ANALYZE")
    }

    /// Every pair, ours then the floor, `rounds` times; the median of each.
    static func run(target: ConnectionConfiguration, url: String, devices: Int, seconds: Int, rounds: Int) async throws -> [Row] {
        let pairs = pairs(devices: devices)
        try await prepare(target: target, devices: devices, rounds: rounds, clients: pairs.map(\.clients).max() ?? 8)
        let probe = try Connection(configuration: target)
        guard let postmaster = Child.parentProcessID(of: probe.serverProcessID) else {
            throw BenchError("the database floor needs the PostgreSQL server on this machine (its CPU is read from /proc)")
        }
        var rows: [Row] = []
        for pair in pairs {
            var ours: [Run] = [], floor: [Run] = []
            for round in 0..<rounds {
                let offset = round * deletesPerRun
                ours.append(try await measure(pair.ours, pair: pair, offset: offset, url: url, postmaster: postmaster, probe: probe, seconds: seconds))
                floor.append(try await measure(pair.floor, pair: pair, offset: offset, url: url, postmaster: postmaster, probe: probe, seconds: seconds))
            }
            func mid(_ runs: [Run], _ value: (Run) -> Double) -> Double { median(runs.map(value)) }
            let row = Row(transaction: pair.name, rows: pair.rows,
                          oursMicroseconds: mid(ours, \.cpu), floorMicroseconds: mid(floor, \.cpu),
                          oursTPS: mid(ours, \.tps), floorTPS: mid(floor, \.tps),
                          oursWALBytes: mid(ours, \.wal), floorWALBytes: mid(floor, \.wal))
            print(String(format: "floor %@: ours %.0f µs (%.0f tps), floor %.0f µs (%.0f tps), %.2f×; WAL %.0f / %.0f B", row.transaction,
                         row.oursMicroseconds, row.oursTPS, row.floorMicroseconds, row.floorTPS, row.ratio, row.oursWALBytes, row.floorWALBytes))
            rows.append(row)
        }
        return rows
    }

    struct Run { let cpu: Double; let tps: Double; let wal: Double }

    private static func measure(_ script: String, pair: Pair, offset: Int, url: String, postmaster: pid_t, probe: Connection,
                                seconds: Int) async throws -> Run {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-floor-\(UUID().uuidString).sql")
        try script.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        var arguments = ["pgbench", "-n", "-M", "prepared", "-c", "\(pair.clients)", "-j", "\(min(pair.clients, 2))", "-D", "k=\(offset)"]
        arguments += pair.transactions.map { ["-t", "\($0)"] } ?? ["-T", "\(seconds)"]
        arguments += ["-f", file.path, url]
        try await settle(probe)
        let walBefore = try probe.query("SELECT pg_current_wal_insert_lsn()::text")[0].decode(0, as: String.self)
        let cpuBefore = Child.postgresCPUSeconds(postmaster: postmaster)
        let (status, text) = try await Child.run(arguments)
        try await settle(probe)
        let cpuAfter = Child.postgresCPUSeconds(postmaster: postmaster)
        let wal = try probe.query("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), \(walBefore)::pg_lsn)::float8")[0].decode(0, as: Double.self)
        guard status == 0 else { throw BenchError("pgbench exited with \(status) on \(pair.name): \(text.suffix(600))") }
        func number(after label: String) -> Double? {
            guard let line = text.split(separator: "\n").first(where: { $0.contains(label) }) else { return nil }
            // "number of transactions actually processed: 12000/12000" under -t.
            return line.split(whereSeparator: { $0 == " " || $0 == "=" || $0 == "/" }).compactMap { Double($0) }.first
        }
        guard let processed = number(after: "number of transactions actually processed"), processed > 0,
              let tps = number(after: "tps ="), let cpuBefore, let cpuAfter
        else { throw BenchError("pgbench printed no result for \(pair.name)") }
        return Run(cpu: (cpuAfter - cpuBefore) * 1_000_000 / processed, tps: tps, wal: wal / processed)
    }

    /// Until pgbench's backends have exited and the postmaster has reaped them: a backend's CPU is read from its own
    /// /proc entry while it runs and from the postmaster's reaped-children total after, and one that is reaped
    /// between the two reads counts in neither (a run then read 41 µs where it cost 200). At most 10 s.
    private static func settle(_ probe: Connection) async throws {
        for _ in 0..<200 {
            let others = try probe.query("""
                SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
                  AND datname = current_database()
                """)[0].decode(0, as: Int.self)
            if others == 0 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        // pg_stat_activity drops a backend as it exits; the postmaster reaps it right after.
        try await Task.sleep(for: .milliseconds(100))
    }

    static func markdown(_ rows: [Row]) -> String {
        var text = """
            PostgreSQL's CPU per transaction (postmaster and all its children, from `/proc`) and WAL bytes per transaction,
            pgbench `-M prepared`, 8 clients (2 for the 500-operation push), median of the rounds; "floor" is the same
            rows through the same indexes of bare copies of the tables (no context, policy, trigger or foreign key).

            | transaction | ours µs | floor µs | ratio | ours tps | floor tps | WAL B ours | WAL B floor | ours µs per row |
            |---|---|---|---|---|---|---|---|---|

            """
        for row in rows {
            let perRow = row.rows > 0 ? String(format: "%.0f", row.oursMicroseconds / Double(row.rows)) : "–"
            text += String(format: "| %@ | %.0f | %.0f | %.2f× | %.0f | %.0f | %.0f | %.0f | %@ |\n", row.transaction,
                           row.oursMicroseconds, row.floorMicroseconds, row.ratio, row.oursTPS, row.floorTPS,
                           row.oursWALBytes, row.floorWALBytes, perRow)
        }
        return text
    }

    /// Replaces what stands between `<!-- floor -->` and `<!-- /floor -->`.
    static func replace(in path: String, with rows: [Row], date: String) throws {
        var text = try String(contentsOfFile: path, encoding: .utf8)
        guard let start = text.range(of: "<!-- floor -->"), let end = text.range(of: "<!-- /floor -->"), start.upperBound <= end.lowerBound
        else { throw BenchError("\(path) has no <!-- floor --> … <!-- /floor --> section") }
        text.replaceSubrange(start.upperBound..<end.lowerBound, with: "\nMeasured \(date).\n\n" + markdown(rows) + "\n")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
