import ArgumentParser
import Foundation
import Logging
import PoopyPalsData
import PostgresClient

@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "poopypals-bench",
        abstract: "Our data layer and API beside pgbench running the same SQL against the same server.")

    @Option(help: "Server URL (default: $DATABASE_URL). A database poopypals_bench is created on it and dropped first.")
    var databaseURL: String?

    @Option(help: "Seconds per timed run.")
    var seconds = 4

    @Option(help: "Alternating rounds (ours, pgbench) per scenario and concurrency.")
    var rounds = 3

    @Option(parsing: .upToNextOption, help: "Concurrency levels.")
    var concurrency: [Int] = [1, 8, 32]

    @Option(help: "Seeded devices (and users).")
    var devices = 1000

    @Option(parsing: .upToNextOption, help: "Table sizes for the scaling runs of scenario 2.")
    var scalingRows: [Int] = [10_000, 1_000_000]

    @Flag(help: "Add a 10 M row scaling run.")
    var tenMillion = false

    @Option(help: "The release `poopypals` binary, for the HTTP runs (skipped when absent).")
    var serverBinary: String?

    @Option(help: "The local cluster's read-write URL (scripts/cluster.sh url), for the read-scale runs (skipped when absent).")
    var clusterURL: String?

    @Option(help: "The cluster's standby alone: the read pool of the read-scale runs.")
    var standbyURL: String?

    @Option(help: "Run only scenarios whose name contains this text.")
    var only: String?

    @Flag(help: "Skip the scaling, HTTP and read-scale runs.")
    var skipExtras = false

    @Flag(help: "Only the read-scale runs (needs --server-binary, --cluster-url and --standby-url).")
    var readScaleOnly = false

    @Flag(help: "Only the server instruction counts under valgrind (needs --server-binary).")
    var instructionsOnly = false

    @Flag(help: "Only the database floor: each request transaction against bare copies of its tables (pgbench, PostgreSQL's CPU).")
    var floorOnly = false

    @Option(help: "A database on a Citus coordinator with its workers registered (scripts/citus.sh createdb), for the Citus row (skipped when absent).")
    var citusURL: String?

    @Option(help: "Devices seeded (through the repositories) on each side of the Citus row.")
    var citusDevices = 200

    @Flag(help: "Only the Citus row (needs --citus-url).")
    var citusOnly = false

    @Flag(help: "Skip the vapor/postgres-nio peer.")
    var skipPeer = false

    @Option(help: "Where to write the results as JSON.")
    var json = "bench/out/results.json"

    @Option(help: "Markdown file whose results section is replaced with this run's tables.")
    var readme: String?

    @Option(help: "The committed instructions per request that this run is compared with (more than 5 % over: exit 1).")
    var budget = "bench/instruction-budget.json"

    @Flag(help: "Record this run's instructions per request as the budget's new baseline.")
    var updateBudget = false

    @Option(help: ArgumentHelp("Serve the Hummingbird + postgres-nio HTTP peer on this port (the bench starts it itself).",
                               visibility: .hidden))
    var servePeer: Int?

    @Option(help: ArgumentHelp("Run this scenario alone, for the client breakdown under callgrind (the bench starts it itself).",
                               visibility: .hidden))
    var profileScenario: String?

    @Option(help: ArgumentHelp("Run the postgres-nio peer's requests of this scenario for --seconds at the first --concurrency, and print the measurement as JSON (the bench starts it itself).",
                               visibility: .hidden))
    var nioPeerRun: String?

    @Option(help: ArgumentHelp("Requests counted per scenario in the client breakdown.", visibility: .hidden))
    var operations = 1000

    func validate() throws {
        if readScaleOnly, serverBinary == nil || clusterURL == nil || standbyURL == nil {
            throw ValidationError("--read-scale-only needs --server-binary, --cluster-url and --standby-url (scripts/bench.sh passes them)")
        }
        if instructionsOnly, serverBinary == nil { throw ValidationError("--instructions-only needs --server-binary") }
        if citusOnly, citusURL == nil { throw ValidationError("--citus-only needs --citus-url (scripts/bench.sh passes it when Citus runs)") }
        guard (1...10_000).contains(citusDevices) else { throw ValidationError("--citus-devices must be 1…10000") }
        guard (1...120).contains(seconds) else { throw ValidationError("--seconds must be 1…120") }
        guard (1...10).contains(rounds) else { throw ValidationError("--rounds must be 1…10") }
        guard concurrency.allSatisfy({ (1...256).contains($0) }) else { throw ValidationError("--concurrency values must be 1…256") }
        guard (1...1_000_000).contains(operations) else { throw ValidationError("--operations must be 1…1000000") }
        guard (1...100_000).contains(devices) else { throw ValidationError("--devices must be 1…100000") }
        guard scalingRows.allSatisfy({ (1...100_000_000).contains($0) }) else { throw ValidationError("--scaling-rows must be 1…100000000") }
    }

    func run() async throws {
        // The data layer's warnings (retries) only: its info lines (a profile created…) would bury the results.
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .warning
            return handler
        }
        if let servePeer {
            guard let url = databaseURL ?? ProcessInfo.processInfo.environment["DATABASE_URL"] else {
                throw BenchError("the HTTP peer needs DATABASE_URL")
            }
            return try await HTTPPeer.serve(port: servePeer, url: url)
        }
        if let profileScenario {
            guard let url = databaseURL else { throw ValidationError("--profile-scenario needs --database-url") }
            return try await ClientBreakdown.runChild(scenario: profileScenario, databaseURL: url, operations: operations, devices: devices)
        }
        if let nioPeerRun {
            guard let url = databaseURL, let level = concurrency.first else { throw ValidationError("--nio-peer-run needs --database-url and --concurrency") }
            return try await NIOPeer.runChild(scenario: nioPeerRun, url: url, concurrency: level, seconds: seconds, devices: devices)
        }
        let started = Date()
        let server = ConnectionConfiguration.resolve(databaseURL: databaseURL, environment: ProcessInfo.processInfo.environment)
        var target = server
        target.database = "poopypals_bench"
        let pgbench = PgBench(connectionString: try urlFor(target))
        try await prepare(server: server, target: target)

        if citusOnly, let citusURL {
            let rows = try await CitusRouting.run(server: server, citus: try citusTarget(citusURL), devices: citusDevices,
                                                  levels: [1, 8], seconds: seconds, rounds: rounds)
            print("\n" + CitusRouting.markdown(rows, devices: citusDevices, seconds: seconds, rounds: rounds))
            if let readme {
                try CitusRouting.replace(in: readme, with: rows, date: ISO8601DateFormatter().string(from: started), devices: citusDevices,
                                         seconds: seconds, rounds: rounds)
            }
            return
        }
        if floorOnly {
            let floor = try await DatabaseFloor.run(target: target, url: try urlFor(target), devices: devices, seconds: seconds, rounds: rounds)
            print("\n" + DatabaseFloor.markdown(floor))
            if let readme { try DatabaseFloor.replace(in: readme, with: floor, date: ISO8601DateFormatter().string(from: started)) }
            return
        }
        var rows: [ReportRow] = []
        for scenario in Scenario.all(devices: devices) where !readScaleOnly && !instructionsOnly && (only.map({ scenario.name.contains($0) }) ?? true) {
            let roundTrips = try await RoundTrips.measure(scenario, connection: target)
            for level in concurrency {
                let row = try await measure(scenario, concurrency: level, target: target, pgbench: pgbench, roundTrips: roundTrips)
                print(row.line)
                rows.append(row)
            }
        }

        var scaling: [ScalingRow] = []
        for size in skipExtras || readScaleOnly || instructionsOnly ? [] : scalingRows + (tenMillion ? [10_000_000] : []) {
            let count = Scaling.devices(for: size, seeded: devices)
            try await Scaling.seed(rows: size, devices: count, target: target)
            // Seeded on a session of its own and measured on fresh ones: the sessions that had seeded and measured
            // 1 M rows then measured 10 k rows at 5 000 ops/s, fresh ones at 6 700 (the first size's speed).
            let pool = ConnectionPool(configuration: .init(connection: target, maxConnections: 8))
            let database = Database(pool: pool)
            let list = Scenario.all(devices: count)[0]
            let repositories = Scenario.Repositories(database: database)
            // Warmed up, then measured `rounds` times; the median run is reported (one cold run of a freshly
            // seeded table moved this ratio by 10 % from one run to the next).
            _ = try await runLoad(concurrency: 8, duration: .seconds(1), executor: pool.taskExecutor()) { _ in
                try await list.ours(repositories, Int.random(in: 1...count))
            }
            var runs: [Measurement] = []
            var references: [Measurement] = []
            for _ in 0..<rounds {
                runs.append(try await runLoad(concurrency: 8, duration: .seconds(seconds), executor: pool.taskExecutor()) { _ in
                    try await list.ours(repositories, Int.random(in: 1...count))
                })
                references.append(try await pgbench.run(script: list.pgbenchScript, concurrency: 8, seconds: seconds))
            }
            runs.sort { $0.opsPerSecond < $1.opsPerSecond }
            references.sort { $0.opsPerSecond < $1.opsPerSecond }
            let measurement = runs[runs.count / 2]
            let reference = references[references.count / 2]
            let row = ScalingRow(rows: size, devices: count, measurement: measurement, pgbench: reference,
                                 plan: try await Scaling.plan(database: database))
            print(String(format: "scaling %d rows: %.0f ops/s, p99 %.2f ms; pgbench %.0f ops/s", size, measurement.opsPerSecond,
                         measurement.p99Milliseconds ?? 0, reference.opsPerSecond))
            scaling.append(row)
            await pool.close()
        }
        // The HTTP runs compare with the scenarios' numbers: back to their data (20 logs per device), not the
        // last scaling size's 10 M rows.
        if !skipExtras && !scaling.isEmpty { try await Scaling.seed(rows: 20 * devices, devices: devices, target: target) }

        var http: [HTTPRow] = []
        // The HTTP peer is this binary, in a process of its own, as our server is.
        let benchBinary = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let peerBinary = skipPeer ? nil : benchBinary
        if let serverBinary, !skipExtras, !readScaleOnly, !instructionsOnly {
            let (devices, httpSeconds, referenceTarget) = (self.devices, seconds * 2, target)
            // The data layer doing each route's work (list for GET, create for POST), measured as the scenarios are.
            let reference: @Sendable (String, Int) async throws -> Double = { route, connections in
                let name = HTTPLoad.scenarioName(for: route)
                guard let scenario = Scenario.all(devices: devices).first(where: { $0.name == name }) else { throw BenchError("no scenario \(name)") }
                let load = try await OurLoad(scenario, concurrency: connections, target: referenceTarget, devices: devices)
                let measured = try await load.run(seconds: httpSeconds)
                await load.close()
                return measured.opsPerSecond
            }
            http = try await HTTPLoad.run(serverBinary: serverBinary, peerBinary: peerBinary, databaseURL: try urlFor(target),
                                          seconds: httpSeconds, devices: devices, reference: reference)
        }
        var instructions: [InstructionRow] = []
        // Counted on the data `--instructions-only` counts on (20 logs per device, as prepared), since the budget's
        // baseline may come from either mode: the runs before wrote thousands of logs (on 2026-11-30 a full run
        // counted 292 k per GET where --instructions-only counted 274-277 k within the hour, same binary).
        if serverBinary != nil, !skipExtras, !readScaleOnly, !instructionsOnly {
            try await Scaling.seed(rows: 20 * devices, devices: devices, target: target)
        }
        if let serverBinary, !skipExtras, !readScaleOnly {
            instructions = try await InstructionCount.run(serverBinary: serverBinary, peerBinary: peerBinary, databaseURL: try urlFor(target),
                                                          seconds: seconds * 2, devices: devices)
        }

        var breakdown: [BreakdownRow] = []
        if let benchBinary, !skipExtras, !readScaleOnly {
            breakdown = try await ClientBreakdown.run(benchBinary: benchBinary, databaseURL: try urlFor(target), devices: devices, operations: operations)
        }

        var readScale: [ReadScaleRow] = []
        if let serverBinary, let clusterURL, let standbyURL, !skipExtras, !instructionsOnly {
            readScale = try await ReadScale.run(serverBinary: serverBinary, clusterURL: clusterURL, standbyURL: standbyURL,
                                                seconds: seconds * 2, devices: devices)
        }

        var citus: [CitusRouting.Row] = []
        if let citusURL, !skipExtras, !readScaleOnly, !instructionsOnly {
            citus = try await CitusRouting.run(server: server, citus: try citusTarget(citusURL), devices: citusDevices,
                                               levels: [1, 8], seconds: seconds, rounds: rounds)
        }

        // Last: it adds rows (logs, tombstones) that the runs above are not measured with.
        var floor: [DatabaseFloor.Row] = []
        if !skipExtras && !readScaleOnly && !instructionsOnly {
            floor = try await DatabaseFloor.run(target: target, url: try urlFor(target), devices: devices, seconds: seconds, rounds: rounds)
        }

        var report = Report(date: ISO8601DateFormatter().string(from: started), machine: Report.machine(),
                            secondsPerRun: seconds, rounds: rounds, scenarios: rows, scaling: scaling, http: http, instructions: instructions, breakdown: breakdown, readScale: readScale,
                            keyDerivationNanoseconds: Report.measureKeyDerivation())
        report.floor = floor
        report.citus = citus
        let baseline = try InstructionBudget.load(budget)
        let budgetLines = InstructionBudget.lines(instructions: instructions, breakdown: breakdown, baseline: baseline)
        report.budget = InstructionBudget.markdown(budgetLines, path: budget)
        print("\n" + report.markdown)
        if !citus.isEmpty { print("\n" + CitusRouting.markdown(citus, devices: citusDevices, seconds: seconds, rounds: rounds)) }
        try report.write(json: json)
        // A partial run never replaces the README's full results.
        let readme = readScaleOnly || instructionsOnly ? nil : readme
        if let readme {
            try report.replaceResults(in: readme)
            if !floor.isEmpty { try DatabaseFloor.replace(in: readme, with: floor, date: report.date) }
            if !citus.isEmpty {
                try CitusRouting.replace(in: readme, with: citus, date: report.date, devices: citusDevices, seconds: seconds, rounds: rounds)
            }
        }
        print("\nWritten to \(json)\(readme.map { " and \($0)" } ?? ""). Took \(Int(Date().timeIntervalSince(started))) s.")
        if updateBudget {
            guard !instructions.isEmpty || !breakdown.isEmpty else { throw BenchError("--update-budget: this run counted no instructions (valgrind missing, or --skip-extras)") }
            let measured = InstructionBudget.measured(instructions: instructions, breakdown: breakdown, date: report.date)
            // A part this run left out keeps its baseline.
            var updated = baseline ?? .init(server: [:], client: [:], measured: report.date)
            updated.server.merge(measured.server) { $1 }
            updated.client.merge(measured.client) { $1 }
            updated.measured = report.date
            try InstructionBudget.write(updated, to: budget)
            print("The instruction budget's baseline is now this run's: \(budget).")
        } else if let over = budgetLines.first(where: \.over) {
            throw BenchError("instructions per request grew more than 5 % over \(budget): \(over.text) (\(budgetLines.filter(\.over).count) over in all; the results above are written)")
        }
    }

    private func prepare(server: ConnectionConfiguration, target: ConnectionConfiguration) async throws {
        let admin = ConnectionPool(configuration: .init(connection: server, maxConnections: 1))
        try await admin.withConnection { conn in
            try conn.executeScript("DROP DATABASE IF EXISTS poopypals_bench WITH (FORCE)")
            try conn.executeScript("CREATE DATABASE poopypals_bench")
        }
        await admin.close()
        let pool = ConnectionPool(configuration: .init(connection: target, maxConnections: 1))
        let files = try MigrationFile.load(directory: URL(fileURLWithPath: "sql"))
        let count = devices
        try await pool.withConnection { conn in
            try Migrator(files: files).migrate(on: conn)
            try Scaling.seedDevices(count, on: conn)
        }
        // 20 logs per device, so that "list 20 newest" lists 20.
        try await Scaling.seed(rows: 20 * count, devices: count, pool: pool)
        await pool.close()
    }

    private func measure(_ scenario: Scenario, concurrency level: Int, target: ConnectionConfiguration,
                         pgbench: PgBench, roundTrips: RoundTrips.Counted) async throws -> ReportRow {
        let devices = self.devices
        let load = try await OurLoad(scenario, concurrency: level, target: target, devices: devices)
        var ours: [Measurement] = []
        var theirs: [Measurement] = []
        var nio: [Measurement] = []
        // The postgres-nio peer: each of its runs in a process of its own (`NIOPeer.measureInChild`), its pool of the
        // same size warmed up the same way; skipped (with a note) when the server is not reached by a URL it can take.
        let peerURL = skipPeer ? nil : try? urlFor(target)
        let peer = peerURL.flatMap { url in (try? NIOPeer.configuration(url: url, maximumConnections: level)).map { _ in url } }
        let benchBinary = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        for _ in 0..<rounds {
            ours.append(try await load.run(seconds: seconds))
            theirs.append(try await pgbench.run(script: scenario.pgbenchScript, concurrency: level, seconds: seconds))
            if let peer, let benchBinary {
                nio.append(try await NIOPeer.measureInChild(binary: benchBinary, scenario: scenario.name, url: peer,
                                                            concurrency: level, seconds: seconds, devices: devices))
            }
        }
        await load.close()
        return ReportRow(scenario: scenario.name, concurrency: level, ours: ours, pgbench: theirs, nio: nio, roundTrips: roundTrips)
    }

    /// The Citus row's database, from `--citus-url` (a URL or key=value string, as `--database-url`).
    private func citusTarget(_ url: String) throws -> ConnectionConfiguration {
        ConnectionConfiguration.resolve(databaseURL: url, environment: [:])
    }

    /// pgbench and the server take a URI or key=value string; point it at the bench database.
    private func urlFor(_ target: ConnectionConfiguration) throws -> String {
        guard let base = target.connectionString else { return "dbname=poopypals_bench" }
        if var components = URLComponents(string: base), components.scheme?.hasPrefix("postgres") == true {
            components.path = "/poopypals_bench"
            return components.string ?? base
        }
        return base + " dbname=poopypals_bench"
    }
}

/// Our data layer running a scenario at a concurrency: a pool of that many connections, warmed up (every connection
/// opened, the statements prepared), then timed runs on random devices.
struct OurLoad {
    let scenario: Scenario
    let concurrency: Int
    let devices: Int
    let repositories: Scenario.Repositories
    let executor: any TaskExecutor

    init(_ scenario: Scenario, concurrency: Int, target: ConnectionConfiguration, devices: Int) async throws {
        self.scenario = scenario
        self.concurrency = concurrency
        self.devices = devices
        let pool = ConnectionPool(configuration: .init(connection: target, maxConnections: concurrency))
        repositories = Scenario.Repositories(database: Database(pool: pool))
        executor = pool.taskExecutor()
        let repositories = repositories
        _ = try await runLoad(concurrency: concurrency, duration: .milliseconds(500), executor: executor) { worker in
            try await scenario.ours(repositories, 1 + (worker * 7919) % devices)
        }
    }

    func run(seconds: Int) async throws -> Measurement {
        let (scenario, repositories, devices) = (scenario, repositories, devices)
        return try await runLoad(concurrency: concurrency, duration: .seconds(seconds), executor: executor) { _ in
            try await scenario.ours(repositories, Int.random(in: 1...devices))
        }
    }

    func close() async { await repositories.database.pool.close() }
}
