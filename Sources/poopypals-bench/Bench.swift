import ArgumentParser
import Foundation
import PoopyPalsData
import PostgresClient

@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "poopypals-bench",
        abstract: "Our data layer beside pgbench running the same SQL against the same server.")

    @Option(help: "Server URL (default: $DATABASE_URL). A database poopypals_bench is created on it and dropped.")
    var databaseURL: String?

    @Option(help: "Seconds per timed run.")
    var seconds = 5

    @Option(help: "Alternating rounds (ours, pgbench) per scenario and concurrency.")
    var rounds = 3

    @Option(parsing: .upToNextOption, help: "Concurrency levels.")
    var concurrency: [Int] = [1, 8, 32]

    @Option(help: "Seeded devices.")
    var devices = 1000

    @Option(help: "Where to write the results as JSON.")
    var json = "bench/out/results.json"

    func validate() throws {
        guard seconds > 0, seconds <= 120 else { throw ValidationError("--seconds must be 1…120") }
        guard rounds > 0, rounds <= 10 else { throw ValidationError("--rounds must be 1…10") }
        guard concurrency.allSatisfy({ (1...256).contains($0) }) else { throw ValidationError("--concurrency values must be 1…256") }
        guard (1...1_000_000).contains(devices) else { throw ValidationError("--devices must be 1…1000000") }
    }

    func run() async throws {
        let server = ConnectionConfiguration.resolve(databaseURL: databaseURL)
        var target = server
        target.database = "poopypals_bench"
        try await prepare(server: server, target: target)

        var rows: [ReportRow] = []
        for scenario in Scenario.all(devices: devices) {
            for level in concurrency {
                rows.append(try await measure(scenario, concurrency: level, target: target))
                print(rows.last!.line, terminator: "\n")
            }
        }
        print("\n" + ReportRow.table(rows))
        try ReportRow.write(rows, to: json)
        print("\nWritten to \(json)")
    }

    private func prepare(server: ConnectionConfiguration, target: ConnectionConfiguration) async throws {
        let admin = ConnectionPool(configuration: .init(connection: server, maxConnections: 1))
        try await admin.withConnection { conn in
            try conn.executeScript("DROP DATABASE IF EXISTS poopypals_bench WITH (FORCE)")
            try conn.executeScript("CREATE DATABASE poopypals_bench")
        }
        await admin.close()
        let database = Database(pool: ConnectionPool(configuration: .init(connection: target, maxConnections: 1)))
        let files = try MigrationFile.load(directory: URL(fileURLWithPath: "sql"))
        let count = devices
        try await database.pool.withConnection { conn in
            try Migrator(files: files).migrate(on: conn)
            // Maintenance path: lift FORCE inside this transaction only, so the owner may seed every device.
            try conn.transaction { conn in
                try conn.executeScript("ALTER TABLE devices NO FORCE ROW LEVEL SECURITY")
                try conn.execute("""
                    INSERT INTO devices (id, model) SELECT ('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid, 'bench'
                    FROM generate_series(1, \(count)) AS n
                    """)
                try conn.executeScript("ALTER TABLE devices FORCE ROW LEVEL SECURITY")
            }
            try conn.executeScript("VACUUM ANALYZE")
        }
        await database.pool.close()
    }

    private func measure(_ scenario: Scenario, concurrency level: Int, target: ConnectionConfiguration) async throws -> ReportRow {
        let database = Database(pool: ConnectionPool(configuration: .init(connection: target, maxConnections: level)))
        let pgbench = PgBench(connectionString: try urlForPgBench(target))
        let devices = self.devices
        // Warm up: open every connection and prepare the statements.
        _ = try await runLoad(concurrency: level, duration: .milliseconds(500)) { worker in
            try await scenario.ours(database, Scenario.device(1 + (worker * 7919) % devices))
        }
        let roundTrips = try await measureRoundTrips(scenario, database: database)
        var ours: [Measurement] = []
        var theirs: [Measurement] = []
        for _ in 0..<rounds {
            ours.append(try await runLoad(concurrency: level, duration: .seconds(seconds)) { _ in
                try await scenario.ours(database, Scenario.device(Int.random(in: 1...devices)))
            })
            theirs.append(try pgbench.run(script: scenario.pgbenchScript, concurrency: level, seconds: seconds))
        }
        await database.pool.close()
        return ReportRow(scenario: scenario.name, concurrency: level, ours: ours, pgbench: theirs, roundTrips: roundTrips)
    }

    /// Round trips of one request, counted on the connection (one per Sync or simple query).
    private func measureRoundTrips(_ scenario: Scenario, database: Database) async throws -> Int {
        let single = Database(pool: ConnectionPool(configuration: .init(connection: database.pool.configuration.connection, maxConnections: 1)))
        defer { Task { await single.pool.close() } }
        try await scenario.ours(single, Scenario.device(1))
        let before = try await single.pool.withConnection { $0.roundTrips }
        try await scenario.ours(single, Scenario.device(2))
        return try await single.pool.withConnection { $0.roundTrips } - before
    }

    /// pgbench takes a URI or key=value string; point it at the bench database.
    private func urlForPgBench(_ target: ConnectionConfiguration) throws -> String {
        guard let base = target.connectionString else { return "dbname=poopypals_bench" }
        if var components = URLComponents(string: base), components.scheme?.hasPrefix("postgres") == true {
            components.path = "/poopypals_bench"
            return components.string ?? base
        }
        return base + " dbname=poopypals_bench"
    }
}
