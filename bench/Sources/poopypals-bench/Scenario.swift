import Foundation
import PoopyPalsData
import PostgresClient

/// One request the app makes, done by our data layer and, as the same SQL, by pgbench.
struct Scenario: Sendable {
    let name: String
    /// pgbench's script: the same statements in one pipeline (`\startpipeline` … `\endpipeline`).
    let pgbenchScript: String
    /// One request through our data layer, for seeded device/user number `n`.
    let ours: @Sendable (Repositories, Int) async throws -> Void

    struct Repositories: Sendable {
        let database: Database
        let users: UserRepository
        let devices: DeviceRepository
        let logs: PoopLogRepository
        let sync: SyncRepository

        init(database: Database) {
            self.database = database
            users = UserRepository(database: database)
            devices = DeviceRepository(database: database)
            logs = PoopLogRepository(database: database)
            sync = SyncRepository(database: database)
        }
    }

    /// Seeded device n and user n, in forms pgbench can build from a number too. Parsed once, so that the
    /// benchmark's own bookkeeping is not counted as ours.
    private static let devices = (0...maxSeeded).map { try! DeviceID(validating: uuid("8000", max($0, 1))) }
    private static let users = (0...maxSeeded).map { UUID(uuidString: uuid("9000", max($0, 1)))! }
    static let maxSeeded = 100_000
    static func device(_ n: Int) -> DeviceID { devices[n] }
    static func user(_ n: Int) -> UUID { users[n] }
    static func email(_ n: Int) -> String { "user\(n)@bench.example" }
    private static func uuid(_ group: String, _ n: Int) -> String {
        let digits = String(n)
        return "00000000-0000-4000-\(group)-" + String(repeating: "0", count: 12 - digits.count) + digits
    }

    /// The key of seeded device n (sql/0010), as a value, as our client binds it. pgbench cannot hash, so its
    /// scripts read the key from `bench.device_keys` (filled by `Scaling.seedDevices`): an index probe, about
    /// 5 µs of server CPU. Until issue 44 they called `poopypals_device_key` on the server, twice per request
    /// (context and statement), said to cost "about a microsecond": measured, 30 µs a call (a SQL function with a
    /// SET clause is not inlined, and its body is parsed at every call; pgbench of the bare call, 8 clients:
    /// 44 µs of PostgreSQL CPU per call against 14 for the same statement without it), so pgbench's side of
    /// every ratio carried about 60 µs of work ours did not.
    static let pgDevice = "(SELECT k.key FROM bench.device_keys k WHERE k.n = :n)"
    /// The device's stable id, found by its key in the statement itself, as every repository statement does (sql/0021).
    static let pgDeviceID = "(SELECT d.id FROM devices d WHERE d.key = \(pgDevice))"
    static let pgUser = "('00000000-0000-4000-9000-' || lpad(:n::text, 12, '0'))::uuid"
    /// What `DeviceTransaction` sends first (the default time limits: 5 s and 2 s).
    static let context = "SELECT set_config('role', poopypals_service_role(), true), set_config('app.device_id', \(pgDevice)::text, true), set_config('statement_timeout', '5000', true), set_config('lock_timeout', '2000', true);"

    static func pipelined(_ devices: Int, _ statement: String) -> String {
        """
        \\set n random(1, \(devices))
        \\startpipeline
        BEGIN;
        \(context)
        \(statement)
        COMMIT;
        \\endpipeline
        """
    }

    /// The same SQL as the repositories send (see PoopLogRepository, UserRepository, DeviceRepository).
    static func all(devices: Int) -> [Scenario] {
        [
            Scenario(
                name: "list 20 newest logs",
                pgbenchScript: pipelined(devices, """
                    SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version FROM poop_logs WHERE device_id = \(pgDeviceID) ORDER BY occurred_at DESC, id DESC LIMIT 21;
                    """),
                ours: { repositories, n in _ = try await repositories.logs.list(limit: 20, as: device(n)) }),
            Scenario(
                name: "ensureProfile (existing user)",
                pgbenchScript: pipelined(devices, """
                    SELECT * FROM poopypals_ensure_profile(\(pgUser), 'user' || :n || '@bench.example', false, NULL, false, NULL);
                    """),
                ours: { repositories, n in _ = try await repositories.users.ensureProfile(as: device(n), id: user(n), email: email(n)) }),
            Scenario(
                name: "register existing device",
                pgbenchScript: pipelined(devices, """
                    SELECT outcome, user_id, model, os_version, app_version, build_number, is_simulator, created_at, last_seen_at FROM poopypals_register_device('iPhone15,2', '18.1', '1.4.0', '140', false, true, '', 30, 0.0333333);
                    """),
                ours: { repositories, n in
                    _ = try await repositories.devices.register(
                        DeviceInfo(model: "iPhone15,2", osVersion: "18.1", appVersion: "1.4.0", buildNumber: "140"), as: device(n))
                }),
            Scenario(
                name: "create log",
                pgbenchScript: pipelined(devices, """
                    INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) VALUES (gen_random_uuid(), \(pgDeviceID), now(), 4, NULL) ON CONFLICT (device_id, id) DO NOTHING RETURNING id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version;
                    SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version FROM poop_logs WHERE device_id = \(pgDeviceID) AND id = gen_random_uuid();
                    """),
                ours: { repositories, n in
                    _ = try await repositories.logs.create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: device(n))
                }),
            Scenario(
                name: "sync pull (first page of 20)",
                // The cursor is a parameter, as ours is (`:after` becomes `$n` under `-M prepared`).
                pgbenchScript: "\\set after 0\n" + pipelined(devices, """
                    WITH device AS (SELECT id, purged_through_seq FROM devices WHERE key = \(pgDevice)), changes AS ((SELECT 'upsert'::text AS op, l.change_seq AS seq, l.id, l.occurred_at, l.bristol_type, l.notes, l.created_at, l.updated_at, l.change_seq AS version FROM poop_logs l WHERE l.device_id = (SELECT id FROM device) AND l.change_seq > :after ORDER BY l.change_seq LIMIT 21) UNION ALL (SELECT 'delete', t.change_seq, t.id, NULL, NULL, NULL, NULL, NULL, NULL FROM poop_log_tombstones t WHERE t.device_id = (SELECT id FROM device) AND t.change_seq > :after ORDER BY t.change_seq LIMIT 21) ORDER BY 2 LIMIT 21) SELECT (SELECT purged_through_seq FROM device) AS purged, c.* FROM (SELECT 1) AS one LEFT JOIN changes c ON true ORDER BY c.seq;
                    """),
                ours: { repositories, n in _ = try await repositories.sync.pull(cursor: nil, limit: 20, as: device(n)) }),
            // Push is three round trips by nature (lock and read, then write, then commit): pgbench runs the same
            // three steps, each its own pipeline.
            Scenario(
                name: "sync push (one new log)",
                pgbenchScript: """
                    \\set n random(1, \(devices))
                    \\startpipeline
                    BEGIN;
                    \(context)
                    SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version FROM poop_logs WHERE device_id = \(pgDeviceID) AND id = gen_random_uuid() FOR UPDATE;
                    \\endpipeline
                    INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) VALUES (gen_random_uuid(), \(pgDeviceID), now(), 4, NULL) ON CONFLICT (device_id, id) DO NOTHING RETURNING id;
                    COMMIT;
                    """,
                ours: { repositories, n in
                    _ = try await repositories.sync.push([.upsert(id: UUID(), occurredAt: Date(), bristolType: 4, notes: nil, baseVersion: nil)],
                                                         as: device(n))
                }),
        ]
    }
}
