import Foundation
import PoopyPalsData
import PostgresClient

/// The Citus row (issue 45): the data-layer scenarios on a Citus coordinator whose database `poopypals migrate`
/// distributed by device (sql/0031: two workers, 32 shards per table), beside the same scenarios on the plain
/// server, in alternating rounds of the same length, each side seeded the same way through the repositories.
///
/// On one machine the three Citus nodes and the plain server share the same two cores: the ratio is what routing a
/// request through a coordinator costs (the coordinator plans the statement, then sends it to a worker), not what
/// more workers would hold.
enum CitusRouting {
    struct Row: Encodable {
        let scenario: String
        let concurrency: Int
        let citus: [Measurement]
        let plain: [Measurement]
        /// Citus's ops/s over plain's, per round (each pair ran back to back).
        var ratios: [Double] { zip(citus, plain).map { $1.opsPerSecond > 0 ? $0.opsPerSecond / $1.opsPerSecond : 0 } }

        var line: String {
            String(format: "| %@ | %d | %.0f | %.0f | %.2f (%.2f–%.2f) | %.2f / %.2f ms | %.2f / %.2f ms |",
                   scenario, concurrency, median(citus.map(\.opsPerSecond)), median(plain.map(\.opsPerSecond)),
                   median(ratios), ratios.min() ?? 0, ratios.max() ?? 0,
                   median(citus.compactMap(\.p50Milliseconds)), median(citus.compactMap(\.p99Milliseconds)),
                   median(plain.compactMap(\.p50Milliseconds)), median(plain.compactMap(\.p99Milliseconds)))
        }
    }

    static let plainDatabase = "poopypals_bench_routing"

    /// Seeds both sides, checks that the Citus one is distributed, then measures every scenario at each level.
    /// - Parameter server: the plain server (a database `plainDatabase` is made on it, dropped first).
    /// - Parameter citus: a database on the coordinator with its workers registered (`scripts/citus.sh createdb`).
    static func run(server: ConnectionConfiguration, citus: ConnectionConfiguration, devices: Int, levels: [Int],
                    seconds: Int, rounds: Int) async throws -> [Row] {
        var plain = server
        plain.database = plainDatabase
        let admin = ConnectionPool(configuration: .init(connection: server, maxConnections: 1))
        try await admin.withConnection { conn in
            try conn.executeScript("DROP DATABASE IF EXISTS \(plainDatabase) WITH (FORCE)")
            try conn.executeScript("CREATE DATABASE \(plainDatabase)")
        }
        await admin.close()
        for (side, target) in [("plain", plain), ("citus", citus)] {
            let started = ContinuousClock.now
            try await migrateAndSeed(target, devices: devices)
            let elapsed = started.duration(to: .now).components
            say("\(side): migrated and seeded \(devices) devices (20 logs each) in \(elapsed.seconds) s")
        }
        let shape = try await distributedTables(citus)
        guard shape.hashed == 3, shape.tables == 6, shape.colocationGroups == 1 else {
            throw BenchError("the Citus database is not distributed by device (\(shape.hashed) of \(shape.tables) tables hashed, in "
                             + "\(shape.colocationGroups) co-location groups): are its workers registered (scripts/citus.sh createdb)?")
        }
        var rows: [Row] = []
        for scenario in Scenario.all(devices: devices) {
            for level in levels {
                let onCitus = try await OurLoad(scenario, concurrency: level, target: citus, devices: devices)
                let onPlain = try await OurLoad(scenario, concurrency: level, target: plain, devices: devices)
                var (citusRuns, plainRuns): ([Measurement], [Measurement]) = ([], [])
                for _ in 0..<rounds {
                    citusRuns.append(try await onCitus.run(seconds: seconds))
                    plainRuns.append(try await onPlain.run(seconds: seconds))
                }
                await onCitus.close()
                await onPlain.close()
                let row = Row(scenario: scenario.name, concurrency: level, citus: citusRuns, plain: plainRuns)
                print("citus " + row.line)
                rows.append(row)
            }
        }
        let cleanup = ConnectionPool(configuration: .init(connection: server, maxConnections: 1))
        try await cleanup.withConnection { try $0.executeScript("DROP DATABASE IF EXISTS \(plainDatabase) WITH (FORCE)") }
        await cleanup.close()
        return rows
    }

    /// `poopypals migrate`'s migrations, then devices 1…`devices` registered and linked to users 1…`devices`
    /// (`Scenario.device(n)`, `Scenario.user(n)`), with 20 logs each: all through the repositories, as the service
    /// writes them (the plain bench's bulk seed lifts row-level security and triggers, which Citus would do per shard).
    static func migrateAndSeed(_ target: ConnectionConfiguration, devices: Int) async throws {
        let files = try MigrationFile.load(directory: URL(fileURLWithPath: "sql"))
        let setup = ConnectionPool(configuration: .init(connection: target, maxConnections: 1))
        try await setup.withConnection { try Migrator(files: files).migrate(on: $0) }
        await setup.close()
        let pool = ConnectionPool(configuration: .init(connection: target, maxConnections: 4))
        let repositories = Scenario.Repositories(database: Database(pool: pool))
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        for n in stride(from: 1 + worker, through: devices, by: 4) {
                            let device = Scenario.device(n)
                            _ = try await repositories.devices.register(DeviceInfo(model: "bench"), as: device)
                            _ = try await repositories.users.ensureProfileAndLink(as: device, id: Scenario.user(n), email: Scenario.email(n))
                            for minute in 0..<20 {
                                _ = try await repositories.logs.create(
                                    NewPoopLog(occurredAt: Date(timeIntervalSinceNow: Double(-60 * (minute + 1))), bristolType: 1 + minute % 7),
                                    as: device)
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        } catch {
            await pool.close()
            throw error
        }
        await pool.close()
    }

    /// The database's distributed and reference tables, and their co-location groups (Citus's own catalog).
    static func distributedTables(_ target: ConnectionConfiguration) async throws -> (hashed: Int, tables: Int, colocationGroups: Int) {
        let pool = ConnectionPool(configuration: .init(connection: target, maxConnections: 1))
        let row = try await pool.withConnection { conn in
            try conn.query("""
                SELECT count(*) FILTER (WHERE partmethod = 'h')::int AS hashed, count(*)::int AS tables,
                       count(DISTINCT colocationid) FILTER (WHERE partmethod = 'h')::int AS groups
                FROM pg_dist_partition
                """)[0]
        }
        await pool.close()
        return (try row.decode("hashed", as: Int.self), try row.decode("tables", as: Int.self), try row.decode("groups", as: Int.self))
    }

    static func markdown(_ rows: [Row], devices: Int, seconds: Int, rounds: Int) -> String {
        var lines = [
            "The data-layer scenarios on the Citus coordinator (scripts/citus.sh: a coordinator and two workers, PostgreSQL 15 + "
                + "Citus; the schema distributed by `poopypals migrate`) and on the plain server, \(devices) devices with 20 logs "
                + "each on both, \(rounds) alternating rounds of \(seconds) s per row; ops/s and latencies are medians. All four "
                + "servers share this machine's cores: the ratio is the cost of routing through a coordinator, not capacity.",
            "",
            "| scenario | connections | Citus ops/s | plain ops/s | Citus / plain (min–max) | Citus p50 / p99 | plain p50 / p99 |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += rows.map(\.line)
        return lines.joined(separator: "\n")
    }

    /// Replaces the `<!-- citus -->` … `<!-- /citus -->` section of `path`.
    static func replace(in path: String, with rows: [Row], date: String, devices: Int, seconds: Int, rounds: Int) throws {
        var text = try String(contentsOfFile: path, encoding: .utf8)
        guard let start = text.range(of: "<!-- citus -->"), let end = text.range(of: "<!-- /citus -->"), start.upperBound <= end.lowerBound
        else { throw BenchError("\(path) has no <!-- citus --> … <!-- /citus --> section") }
        text.replaceSubrange(start.upperBound..<end.lowerBound,
                             with: "\nMeasured \(date).\n\n" + markdown(rows, devices: devices, seconds: seconds, rounds: rounds) + "\n")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    private static func say(_ text: String) {
        FileHandle.standardError.write(Data("bench: \(text)\n".utf8))
    }
}
