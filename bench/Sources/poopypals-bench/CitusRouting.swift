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
        // The device's tables distributed and co-located, every other table a reference table (a table added by a later
        // migration counted, not a fixed number of them: sql/0033 made it seven, and a count of six stopped this run).
        guard shape.hashed == ["devices", "poop_log_tombstones", "poop_logs"], shape.colocationGroups == 1, shape.local.isEmpty else {
            throw BenchError("the Citus database is not distributed by device (hashed: \(shape.hashed), in \(shape.colocationGroups) "
                             + "co-location groups; not distributed: \(shape.local)): are its workers registered (scripts/citus.sh createdb)?")
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
    /// The hashed (distributed) tables, how many co-location groups they make, and the public tables Citus does not
    /// know (neither distributed nor reference tables; the migrations' own bookkeeping aside).
    static func distributedTables(_ target: ConnectionConfiguration) async throws -> (hashed: [String], colocationGroups: Int, local: [String]) {
        let pool = ConnectionPool(configuration: .init(connection: target, maxConnections: 1))
        let shape = try await pool.withConnection { conn in
            let hashed = try conn.query("""
                SELECT logicalrelid::text FROM pg_dist_partition WHERE partmethod = 'h' ORDER BY 1
                """).map { try $0.decode(0, as: String.self) }
            let groups = try conn.query("SELECT count(DISTINCT colocationid)::int FROM pg_dist_partition WHERE partmethod = 'h'")[0]
                .decode(0, as: Int.self)
            let local = try conn.query("""
                SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> 'schema_migrations'
                  AND NOT EXISTS (SELECT FROM pg_dist_partition p WHERE p.logicalrelid = c.oid)
                ORDER BY 1
                """).map { try $0.decode(0, as: String.self) }
            return (hashed, groups, local)
        }
        await pool.close()
        return shape
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
