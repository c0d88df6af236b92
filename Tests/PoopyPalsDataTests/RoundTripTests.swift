import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// Issue 59: the round trips of a request, counted on the wire (libpq's own protocol trace: each run of frontend
/// messages after a backend message is one request/response turn), as `make bench` counts them. In steady state, a
/// device this instance has served before, a list, a create and a pull are one round trip each and a push three
/// (lock and read, write, commit); a device's first request on an instance has one more, the lookup of its kept id
/// (`KeptDeviceIDs`). A change that adds a round trip to the steady state fails here, not only in a benchmark.
@Suite("Round trips of a request")
struct RoundTripTests {
    @Test func aRequestIsOneRoundTripInSteadyStateAndOneMoreOnADevicesFirst() async throws {
        try await TestDatabase.withMigrated { db in
            // Registered through another instance: this one has not seen either device yet.
            let other = Database(pool: db.pool(size: 1))
            let warm = try DeviceID(UUID()), device = try DeviceID(UUID())
            for id in [warm, device] { _ = try await DeviceRepository(database: other).register(DeviceInfo(), as: id) }
            await other.pool.close()

            let database = Database(pool: db.pool(size: 1))  // one connection: the trace sees every request
            let logs = PoopLogRepository(database: database), sync = SyncRepository(database: database)
            let requests: [(name: String, run: @Sendable (DeviceID) async throws -> Void)] = [
                ("list", { _ = try await logs.list(limit: 20, as: $0) }),
                ("create", { _ = try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 4), as: $0) }),
                ("pull", { _ = try await sync.pull(cursor: nil, limit: 20, as: $0) }),
                ("push", { _ = try await sync.push([.upsert(id: UUID(), occurredAt: Date(), bristolType: 4, notes: nil, baseVersion: nil)], as: $0) }),
            ]
            // Connected, each statement prepared, on another device: what is traced below is the request alone.
            for request in requests { try await request.run(warm) }

            let first = try await Self.roundTrips(on: database) { try await requests[0].run(device) }
            var steady: [String: Int] = [:]
            for request in requests { steady[request.name] = try await Self.roundTrips(on: database) { try await request.run(device) } }
            #expect(first == 2, "a device's first request: its kept id looked up, then the request")
            #expect(steady == ["list": 1, "create": 1, "pull": 1, "push": 3])
            await database.pool.close()
        }
    }

    /// Issue 59: a read of one round trip is a transaction of its own without BEGIN and COMMIT (PostgreSQL's implicit
    /// transaction up to the pipeline's Sync): two statements, the context and the read, not four. The read still runs
    /// as the device, as the service role, read-only, and nothing of it outlives the round trip on the connection.
    @Test func aReadOfOneRoundTripIsItsContextAndItsStatementAlone() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let device = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: device)
            let read = { @Sendable in
                try await database.asDevice(device, readOnly: true) { tx in
                    try tx.finalQuery("""
                        SELECT current_setting('app.device_id') || ' ' || current_user || ' ' || current_setting('transaction_read_only')
                        """)[0].decode(0, as: String.self)
                }
            }
            _ = try await read()  // prepared
            var seen = ""
            let lines = try await Self.traced(on: database) { seen = try await read() }
            let executes = lines.filter { $0.split(separator: "\t").dropFirst(2).first == "Execute" }.count
            // On Citus the read keeps BEGIN and COMMIT (its context's SET LOCAL statements need a transaction block).
            if TestEnvironment.distributesEveryDatabase {
                #expect(executes > 4, "\(lines.joined(separator: "\n"))")
            } else {
                #expect(executes == 2, "\(lines.joined(separator: "\n"))")
            }
            let role = try await Superuser.column("SELECT poopypals_service_role()", in: db.name)
            #expect(seen == "\(device.key.uuidString.lowercased()) \(role.first ?? "?") on")
            // The same connection, next: no device, not the service role, not read-only.
            let after = try await database.pool.withConnection {
                try $0.query("""
                    SELECT coalesce(current_setting('app.device_id', true), '') || ' ' || current_setting('transaction_read_only')
                           || ' ' || (current_user = poopypals_service_role())::text
                    """)[0].decode(0, as: String.self)
            }
            #expect(after == " off false")
            // Read-only without BEGIN READ ONLY: a write in it is refused.
            let write = await #expect(throws: (any Error).self) {
                try await database.asDevice(device, readOnly: true) { tx in try tx.finalQuery("UPDATE devices SET log_count = log_count") }
            }
            #expect(write.flatMap { PostgresError.find(in: $0) }?.sqlState == .readOnlySQLTransaction, "\(String(describing: write))")
            await database.pool.close()
        }
    }

    /// The request/response turns `body` makes on the pool's one connection.
    static func roundTrips(on database: Database, _ body: () async throws -> Void) async throws -> Int {
        var turns = 0
        var previous: Character = "B"
        for line in try await traced(on: database, body) {
            guard let direction = line.first, direction == "F" || direction == "B" else { continue }
            if direction == "F" && previous == "B" { turns += 1 }
            previous = direction
        }
        return turns
    }

    /// libpq's protocol trace of what `body` sends and receives on the pool's one connection, a line a message.
    static func traced(on database: Database, _ body: () async throws -> Void) async throws -> [Substring] {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-trace-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await database.pool.withConnection { try $0.startTracing(to: path) }
        do {
            try await body()
        } catch {
            try? await database.pool.withConnection { $0.stopTracing() }
            throw error
        }
        try await database.pool.withConnection { $0.stopTracing() }
        return try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
    }
}
