import Foundation
import PoopyPalsData
import PostgresClient

/// Where the data layer's own instructions go in one request of a scenario, counted by callgrind in a process that
/// runs only that scenario on one connection (the bench binary itself, `--profile-scenario`). Each function's own
/// instructions (not those of what it calls: async functions form cycles in callgrind's call graph, which make
/// inclusive counts meaningless) are given to the part its name or library says.
struct BreakdownRow: Encodable {
    let scenario: String
    let operations: Int
    /// Every instruction the process ran between the two markers, every thread, per request.
    let total: Double
    /// Row decoding: `QueryResult`, `Row`, `PostgresDecodable`, the models' `init(row:)`, libpq's field accessors.
    let decode: Double
    /// Parameter encoding: `PostgresQuery`, `PostgresEncodable`, the parameter arrays handed to libpq.
    let encode: Double
    /// libpq's protocol work (sending, parsing the server's messages, storing results).
    let libpq: Double
    /// Swift's runtime and the C library: reference counting, allocation, copies, strings, hashing.
    let runtime: Double
    /// Swift's concurrency runtime: tasks, continuations, executors (the hops to the pool's thread and back).
    let concurrency: Double
    /// Our other code: the pipeline's and the transaction's bookkeeping (statement cache, results, pool, device
    /// context, deadlines, retries' checks).
    let bookkeeping: Double
}

/// Marks where the counted part of a `--profile-scenario` run begins and ends; callgrind zeroes its counts when the
/// first is entered (`--zero-before`) and dumps them when the second is (`--dump-before`), found by their names.
/// Their bodies differ: identical ones were merged by the optimiser, the first becoming a jump to the second.
nonisolated(unsafe) private var markerCalls = 0
@inline(never) func callgrindZeroHere() { markerCalls &+= 1 }
@inline(never) func callgrindDumpHere() { markerCalls &+= 2 }

enum ClientBreakdown {
    static let warmUp = 200

    /// In the child: `operations` requests of `scenario`, one after another on a pool of one connection, after a
    /// warm-up (connection, prepared statements, lazy binding) that serves every device once, between the markers.
    /// The counted requests are then a device's requests in steady state: its kept id known (`KeptDeviceIDs`). With
    /// 200 devices warmed of 1 000, four in five counted requests were a device's first, each with the lookup of its
    /// id (a statement and a round trip more, and no read without BEGIN): `RoundTrips` counts that request apart.
    static func runChild(scenario name: String, databaseURL: String, operations: Int, devices: Int) async throws {
        guard let scenario = Scenario.all(devices: devices).first(where: { $0.name == name }) else {
            throw BenchError("no scenario named \(name)")
        }
        let pool = ConnectionPool(configuration: .init(connection: ConnectionConfiguration(connectionString: databaseURL), maxConnections: 1))
        let repositories = Scenario.Repositories(database: Database(pool: pool))
        // On the pool's thread, as the HTTP server runs every request.
        try await withTaskExecutorPreference(pool.taskExecutor()) {
            for index in 0..<max(warmUp, devices) { try await scenario.ours(repositories, 1 + index % devices) }
            callgrindZeroHere()
            for index in 0..<operations { try await scenario.ours(repositories, 1 + (index &* 7919) % devices) }
            callgrindDumpHere()
        }
        await pool.close()
    }

    /// Each scenario in a child under callgrind; the dump taken at the end marker is split into the parts above.
    static func run(benchBinary: String, databaseURL: String, devices: Int, operations: Int) async throws -> [BreakdownRow] {
        guard let valgrind = InstructionCount.valgrind() else {
            print("client breakdown skipped: valgrind is not installed (Debian: apt-get install valgrind)")
            return []
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-breakdown-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        guard let shim = try await InstructionCount.sigsuspendShim(in: directory),
              let binary = try await InstructionCount.withoutDebugInfo(benchBinary, in: directory)
        else {
            print("client breakdown skipped: cc and objcopy are needed (Debian: apt-get install gcc binutils)")
            return []
        }
        var rows: [BreakdownRow] = []
        for (index, scenario) in Scenario.all(devices: devices).enumerated() {
            let out = directory.appendingPathComponent("scenario-\(index).out").path
            let (status, _) = try await Child.run(
                [valgrind, "--tool=callgrind", "--callgrind-out-file=\(out)", "--compress-strings=no", "--compress-pos=no",
                 "--zero-before=*callgrindZeroHere*", "--dump-before=*callgrindDumpHere*",
                 binary, "--profile-scenario", scenario.name, "--operations", "\(operations)", "--devices", "\(devices)",
                 "--database-url", databaseURL],
                environment: ["LD_PRELOAD": shim, "LOG_LEVEL": "warning"])
            guard status == 0 else { throw BenchError("the \(scenario.name) run under callgrind exited with \(status)") }
            // The dump taken at the end marker, not the one at exit.
            let dumps = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                .filter { $0.hasPrefix("scenario-\(index).out") }
                .map { try String(contentsOfFile: directory.appendingPathComponent($0).path, encoding: .utf8) }
            guard let dump = dumps.first(where: { $0.contains("desc: Trigger: --dump-before") })
            else { throw BenchError("callgrind wrote no dump at the end marker for \(scenario.name)") }
            let profile = try CallgrindProfile(parsing: dump)
            let parts = try await profile.parts()
            let per = { (part: CallgrindProfile.Part) in Double(parts[part, default: 0]) / Double(operations) }
            let row = BreakdownRow(scenario: scenario.name, operations: operations, total: Double(profile.total) / Double(operations),
                                   decode: per(.decode), encode: per(.encode), libpq: per(.libpq), runtime: per(.runtime),
                                   concurrency: per(.concurrency), bookkeeping: per(.bookkeeping))
            print(String(format: "breakdown: %@: %.0f instructions per request: decode %.0f, encode %.0f, libpq %.0f, runtime %.0f, concurrency %.0f, bookkeeping %.0f",
                         row.scenario, row.total, row.decode, row.encode, row.libpq, row.runtime, row.concurrency, row.bookkeeping))
            rows.append(row)
        }
        return rows
    }
}

/// A callgrind dump (the event Ir alone): each function's own instructions. `parts()` needs the names written out
/// (`--compress-strings=no`); the total and its check do not.
struct CallgrindProfile {
    struct Function: Hashable {
        let object: String
        let name: String
    }

    enum Part {
        case decode, encode, libpq, runtime, concurrency, bookkeeping
    }

    /// The dump's `totals:` line: what its functions' own counts add up to.
    private(set) var total = 0
    private(set) var own: [Function: Int] = [:]

    init(parsing text: String) throws {
        var object = ""
        var function = Function(object: "", name: "")
        var nextCostIsACall = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            if let first = line.first, first.isNumber || first == "+" || first == "-" || first == "*" {
                guard let cost = Int(line.split(separator: " ").last ?? "") else { throw BenchError("callgrind: a cost line without a count: \(line)") }
                // The line after `calls=` is the call's inclusive cost, not the caller's own.
                if nextCostIsACall { nextCostIsACall = false } else { own[function, default: 0] += cost }
            } else if line.hasPrefix("ob=") {
                object = String(line.dropFirst(3))
            } else if line.hasPrefix("fn=") {
                function = Function(object: object, name: String(line.dropFirst(3)))
            } else if line.hasPrefix("calls=") {
                nextCostIsACall = true
            } else if line.hasPrefix("events:") {
                guard line.split(separator: " ").dropFirst().elementsEqual(["Ir"]) else { throw BenchError("callgrind: events other than Ir: \(line)") }
            } else if line.hasPrefix("totals:") {
                total = Int(line.split(separator: " ").last ?? "") ?? 0
            }
        }
        let counted = own.values.reduce(0, +)
        guard total == counted else { throw BenchError("callgrind: the functions' counts add up to \(counted), the dump's total is \(total)") }
    }

    /// Own instructions per part; Swift names are demangled first (`swift demangle`).
    func parts() async throws -> [Part: Int] {
        let readable = try await Self.demangled(own.keys.map(\.name))
        var sums: [Part: Int] = [:]
        for (function, cost) in own {
            sums[Self.part(object: function.object, name: readable[function.name] ?? function.name), default: 0] += cost
        }
        return sums
    }

    /// The part a function belongs to, from its library and (demangled) name.
    static func part(object: String, name: String) -> Part {
        let library = URL(fileURLWithPath: object).lastPathComponent
        if library.hasPrefix("libpq.so") {
            // Reading a result's fields is decoding; the rest is the protocol.
            return ["PQgetvalue", "PQgetisnull", "PQgetlength", "PQntuples", "PQnfields", "PQfname", "PQfnumber", "PQftype", "PQfformat"]
                .contains(name) ? .decode : .libpq
        }
        if library.hasPrefix("libswift_Concurrency") { return .concurrency }
        if library.hasPrefix("libswiftCore") || library.hasPrefix("libc.so") || library.hasPrefix("ld-linux") || library.hasPrefix("libm.so") {
            return .runtime
        }
        if ["PostgresDecodable", "QueryResult", "Row.", "init(row:", "postgresBinary", "postgresText", "decodeBinary", "Columns"].contains(where: name.contains) {
            return .decode
        }
        if ["PostgresEncodable", "PostgresQuery", "appendInterpolation", "appendLiteral", "withCStringArray"].contains(where: name.contains) {
            return .encode
        }
        return .bookkeeping
    }

    /// Swift names made readable by `swift demangle`, in batches (the argument list has a limit).
    static func demangled(_ names: [String]) async throws -> [String: String] {
        var readable: [String: String] = [:]
        let mangled = names.filter { $0.hasPrefix("$s") || $0.hasPrefix("_$s") }
        var start = 0
        while start < mangled.count {
            let batch = Array(mangled[start..<min(mangled.count, start + 500)])
            let (status, output) = try await Child.run(["swift", "demangle", "--simplified", "--compact"] + batch)
            let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
            guard status == 0, lines.count >= batch.count else { throw BenchError("swift demangle failed (\(status))") }
            for (name, line) in zip(batch, lines) { readable[name] = String(line) }
            start += batch.count
        }
        return readable
    }
}
