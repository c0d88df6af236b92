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
    /// The device's stored id (`devices.id`) as the service binds it in every statement: kept per instance after
    /// the device's first request (sql/0030, `KeptDeviceIDs`), checked in the context statement. pgbench reads it
    /// beside the key. Until issue 57 the scripts found it by the key in each statement (`devices` by `key`), as
    /// the repositories did before sql/0030, and their context set four settings and checked nothing.
    static let pgStoredID = "(SELECT k.id FROM bench.device_keys k WHERE k.n = :n)"
    static let pgUser = "('00000000-0000-4000-9000-' || lpad(:n::text, 12, '0'))::uuid"
    /// Device n's fixed log (seeded by `DatabaseFloor.prepare`; before it, an id no row has): the id the database
    /// floor's get looks for. Until issue 57 create's read-back compared the id with `gen_random_uuid()`, which no
    /// index can take (a volatile function): the device's every log was read and compared, where ours probes.
    static let pgFixedLog = "('00000000-0000-4000-a000-' || lpad(:n::text, 12, '0'))::uuid"

    /// `PoopLogRepository.create`'s insert, the stored id bound, sent with no check of the kept id before it (the
    /// insert's trigger checks it). Its read-back is sent only when the insert returned nothing (a repeated upload, in a
    /// transaction of its own). Both issue 57.
    static let pgCreate = """
        INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) VALUES (gen_random_uuid(), \(pgStoredID), now(), 4, NULL) ON CONFLICT (device_id, id) DO NOTHING RETURNING id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version;
        """
    /// `SyncRepository.pull`'s first page of 20 (`:after` bound, as ours is), the stored id bound.
    static let pgPull = "WITH changes AS ((SELECT 'upsert'::text AS op, l.change_seq AS seq, l.id, l.occurred_at, l.bristol_type, l.notes, l.created_at, l.updated_at, l.change_seq AS version FROM poop_logs l WHERE l.device_id = \(pgStoredID) AND l.change_seq > :after ORDER BY l.change_seq LIMIT 21) UNION ALL (SELECT 'delete', t.change_seq, t.id, NULL, NULL, NULL, NULL, NULL, NULL FROM poop_log_tombstones t WHERE t.device_id = \(pgStoredID) AND t.change_seq > :after ORDER BY t.change_seq LIMIT 21) ORDER BY 2 LIMIT 21) SELECT (SELECT d.purged_through_seq FROM devices d WHERE d.id = \(pgStoredID)) AS purged, c.* FROM (SELECT 1) AS one LEFT JOIN changes c ON true ORDER BY c.seq;"

    /// A new log's id, the same in a push's locking read and its insert (as the service binds one id in both): the
    /// `op`-th of a push, from `:r` (`pgNewLogs`, per transaction). Until issue 57 both compared with
    /// `gen_random_uuid()`, each its own id, and the read, which no index could take (a volatile function), read
    /// every log of the device: a cost that grew with the device's logs, in the push of 500 most of all.
    static func pgNewLog(_ op: Int) -> String {
        "('00000000-0000-4000-c000-' || lpad((:r::bigint * 1000 + \(op))::text, 12, '0'))::uuid"
    }
    static let pgNewLogs = "\\set r random(1, 999999999)"

    /// What `DeviceTransaction` sends first for a device whose id the instance keeps (steady state), with the
    /// service's default settings: its own text (`DeviceTransaction.contextStatement`), the key as `:k`'s device, the
    /// settings as literals, then the kept id's check (for the work that names the device by its stored id and does not
    /// check it itself: not registration's, not ensureProfile's, not create's). A read's context sets no quota, write bucket or idle limit.
    static func context(readOnly: Bool = false, checksKeptID: Bool = true) -> String {
        let (text, values) = DeviceTransaction.contextStatement(readOnly: readOnly, checkingKeptID: checksKeptID)
        var bound = ["\(pgDevice)::text"] + values.map { "'\($0)'" }
        if checksKeptID { bound.append(pgStoredID) }
        // From the last parameter down: $1 never replaces the start of $10.
        var sql = text
        for (index, value) in bound.enumerated().reversed() {
            sql = sql.replacingOccurrences(of: "$\(index + 1)", with: value)
        }
        return sql + ";"
    }

    /// A write of one round trip as the service sends it (issue 59, `DeviceTransaction.writesWithoutBegin`): the context
    /// and the statement, no BEGIN and no COMMIT (the pipeline up to its Sync is one transaction, committed there).
    static func pipelined(_ devices: Int, _ statement: String, checksKeptID: Bool = true) -> String {
        """
        \\set n random(1, \(devices))
        \\startpipeline
        \(context(checksKeptID: checksKeptID))
        \(statement)
        \\endpipeline
        """
    }

    /// A read of one round trip as the service sends it (issue 59, 69f1a30): the read-only context and the statement,
    /// no BEGIN and no COMMIT (the pipeline up to its Sync is one transaction). `checksKeptID: false` for a read that
    /// checks the kept id itself (`keptIDRead`).
    static func read(_ devices: Int, _ statement: String, checksKeptID: Bool = true) -> String {
        """
        \\set n random(1, \(devices))
        \\startpipeline
        \(context(readOnly: true, checksKeptID: checksKeptID))
        \(statement)
        \\endpipeline
        """
    }

    /// A get or list statement as the service sends it for a device whose id it keeps: its own text
    /// (`PoopLogRepository.keptIDReadStatements`, which checks the kept id only when it finds no row), the stored id
    /// as `$1`, `log` as `$2`.
    static func keptIDRead(_ text: String, log: String = "") -> String {
        text.replacingOccurrences(of: "$2", with: log).replacingOccurrences(of: "$1", with: pgStoredID) + ";"
    }

    /// The same SQL as the repositories send (see PoopLogRepository, UserRepository, DeviceRepository).
    static func all(devices: Int) -> [Scenario] {
        [
            Scenario(
                name: "list 20 newest logs",
                pgbenchScript: read(devices, keptIDRead(PoopLogRepository.keptIDReadStatements.list), checksKeptID: false),
                ours: { repositories, n in _ = try await repositories.logs.list(limit: 20, as: device(n)) }),
            Scenario(
                name: "ensureProfile (existing user)",
                pgbenchScript: pipelined(devices, """
                    SELECT * FROM poopypals_ensure_profile(\(pgUser), 'user' || :n || '@bench.example', false, NULL, false, NULL);
                    """, checksKeptID: false),
                ours: { repositories, n in _ = try await repositories.users.ensureProfile(as: device(n), id: user(n), email: email(n)) }),
            Scenario(
                name: "register existing device",
                pgbenchScript: pipelined(devices, """
                    SELECT outcome, user_id, model, os_version, app_version, build_number, is_simulator, created_at, last_seen_at FROM poopypals_register_device('iPhone15,2', '18.1', '1.4.0', '140', false, true, '', 30, 0.0333333);
                    """, checksKeptID: false),
                ours: { repositories, n in
                    _ = try await repositories.devices.register(
                        DeviceInfo(model: "iPhone15,2", osVersion: "18.1", appVersion: "1.4.0", buildNumber: "140"), as: device(n))
                }),
            Scenario(
                name: "create log",
                pgbenchScript: pipelined(devices, """
                    \(pgCreate)
                    """, checksKeptID: false),
                ours: { repositories, n in
                    _ = try await repositories.logs.create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: device(n))
                }),
            Scenario(
                name: "sync pull (first page of 20)",
                // The cursor is a parameter, as ours is (`:after` becomes `$n` under `-M prepared`).
                pgbenchScript: "\\set after 0\n" + read(devices, """
                    \(pgPull)
                    """),
                ours: { repositories, n in _ = try await repositories.sync.pull(cursor: nil, limit: 20, as: device(n)) }),
            // Push is three round trips by nature (lock and read, then write, then commit): pgbench runs the same
            // three steps, each its own pipeline.
            Scenario(
                name: "sync push (one new log)",
                pgbenchScript: """
                    \\set n random(1, \(devices))
                    \(pgNewLogs)
                    \\startpipeline
                    BEGIN;
                    \(context())
                    SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version FROM poop_logs WHERE device_id = \(pgStoredID) AND id = \(pgNewLog(0)) FOR UPDATE;
                    \\endpipeline
                    INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) VALUES (\(pgNewLog(0)), \(pgStoredID), now(), 4, NULL) ON CONFLICT (device_id, id) DO NOTHING RETURNING id;
                    COMMIT;
                    """,
                ours: { repositories, n in
                    _ = try await repositories.sync.push([.upsert(id: UUID(), occurredAt: Date(), bristolType: 4, notes: nil, baseVersion: nil)],
                                                         as: device(n))
                }),
        ]
    }
}
