import Foundation
import PoopyPalsData
import PostgresClient

/// Round trips of one request, read from libpq's own protocol trace of the wire: every run of frontend
/// messages (`F`) that follows a backend message (`B`) is one request/response turn.
enum RoundTrips {
    /// A request's round trips in steady state (a device this instance has served before) and on a device's
    /// first request to an instance (its kept id looked up once: `KeptDeviceIDs`). Both are measured.
    struct Counted: Encodable, Sendable {
        let steady: Int
        let first: Int
        var cell: String { "\(steady) / \(first)" }
    }

    /// Connects and prepares on device 1 (a warm-up), then traces device 2's first request and its next one.
    static func measure(_ scenario: Scenario, connection: ConnectionConfiguration) async throws -> Counted {
        let database = Database(pool: ConnectionPool(configuration: .init(connection: connection, maxConnections: 1)))
        let repositories = Scenario.Repositories(database: database)
        do {
            try await scenario.ours(repositories, 1)
            let first = try await traced(database) { try await scenario.ours(repositories, 2) }
            let steady = try await traced(database) { try await scenario.ours(repositories, 2) }
            await database.pool.close()
            return Counted(steady: steady, first: first)
        } catch {
            await database.pool.close()
            throw error
        }
    }

    /// The turns `body` makes on the pool's one connection.
    static func traced(_ database: Database, _ body: () async throws -> Void) async throws -> Int {
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
        return turns(inTrace: try String(contentsOfFile: path, encoding: .utf8))
    }

    static func turns(inTrace trace: String) -> Int {
        var turns = 0
        var previous: Character = "B"
        for line in trace.split(separator: "\n") {
            guard let direction = line.first, direction == "F" || direction == "B" else { continue }
            if direction == "F" && previous == "B" { turns += 1 }
            previous = direction
        }
        return turns
    }
}
