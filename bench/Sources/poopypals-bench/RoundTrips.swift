import Foundation
import PoopyPalsData
import PostgresClient

/// Round trips of one request, read from libpq's own protocol trace of the wire: every run of frontend
/// messages (`F`) that follows a backend message (`B`) is one request/response turn.
enum RoundTrips {
    static func measure(_ scenario: Scenario, connection: ConnectionConfiguration) async throws -> Int {
        let database = Database(pool: ConnectionPool(configuration: .init(connection: connection, maxConnections: 1)))
        let repositories = Scenario.Repositories(database: database)
        try await scenario.ours(repositories, 1)  // warm: connect and prepare, as in steady state
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-trace-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await database.pool.withConnection { try $0.startTracing(to: path) }
        try await scenario.ours(repositories, 2)
        try await database.pool.withConnection { $0.stopTracing() }
        await database.pool.close()
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
