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

        init(database: Database) {
            self.database = database
            users = UserRepository(database: database)
            devices = DeviceRepository(database: database)
            logs = PoopLogRepository(database: database)
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

    static let pgDevice = "('00000000-0000-4000-8000-' || lpad(:n::text, 12, '0'))"
    static let pgUser = "('00000000-0000-4000-9000-' || lpad(:n::text, 12, '0'))::uuid"
    static let context = "SELECT set_config('role', 'poopypals_app', true), set_config('app.device_id', \(pgDevice), true);"

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
                    SELECT id, occurred_at, bristol_type, notes, created_at, updated_at FROM poop_logs ORDER BY occurred_at DESC, id DESC LIMIT 21;
                    """),
                ours: { repositories, n in _ = try await repositories.logs.list(limit: 20, as: device(n)) }),
            Scenario(
                name: "ensureProfile (existing user)",
                pgbenchScript: pipelined(devices, """
                    SELECT id, email, full_name, role, date_of_birth, created_at, updated_at FROM users WHERE id = \(pgUser) OR email = 'user' || :n || '@bench.example' ORDER BY (id = \(pgUser)) DESC LIMIT 1;
                    """),
                ours: { repositories, n in _ = try await repositories.users.ensureProfile(as: device(n), id: user(n), email: email(n)) }),
            Scenario(
                name: "register existing device",
                pgbenchScript: pipelined(devices, """
                    INSERT INTO devices (id, model, os_version, app_version, build_number, is_simulator) VALUES (\(pgDevice)::uuid, 'iPhone15,2', '18.1', '1.4.0', '140', false) ON CONFLICT (id) DO UPDATE SET model = EXCLUDED.model, os_version = EXCLUDED.os_version, app_version = EXCLUDED.app_version, build_number = EXCLUDED.build_number, is_simulator = EXCLUDED.is_simulator, last_seen_at = now() RETURNING id, user_id, model, os_version, app_version, build_number, is_simulator, created_at, last_seen_at, (xmax = 0) AS inserted;
                    """),
                ours: { repositories, n in
                    _ = try await repositories.devices.register(
                        DeviceInfo(model: "iPhone15,2", osVersion: "18.1", appVersion: "1.4.0", buildNumber: "140"), as: device(n))
                }),
            Scenario(
                name: "create log",
                pgbenchScript: pipelined(devices, """
                    WITH inserted AS (INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) VALUES (gen_random_uuid(), \(pgDevice)::uuid, now(), 4, NULL) ON CONFLICT (id) DO NOTHING RETURNING id, occurred_at, bristol_type, notes, created_at, updated_at) SELECT *, true AS created FROM inserted UNION ALL SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, false FROM poop_logs WHERE id = gen_random_uuid() AND NOT EXISTS (SELECT FROM inserted);
                    """),
                ours: { repositories, n in
                    _ = try await repositories.logs.create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: device(n))
                }),
        ]
    }
}
