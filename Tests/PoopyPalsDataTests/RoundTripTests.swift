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

    /// The request/response turns `body` makes on the pool's one connection.
    static func roundTrips(on database: Database, _ body: () async throws -> Void) async throws -> Int {
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
        var turns = 0
        var previous: Character = "B"
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            guard let direction = line.first, direction == "F" || direction == "B" else { continue }
            if direction == "F" && previous == "B" { turns += 1 }
            previous = direction
        }
        return turns
    }
}
