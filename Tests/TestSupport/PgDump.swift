import Foundation

/// `pg_dump` of a test database as the server's superuser (forced row-level security hides rows from the
/// owner): what a backup, a replica or a leaked dump would hold.
public enum PgDump {
    public static var superuserURL: String? {
        ProcessInfo.processInfo.environment["POOPYPALS_TEST_SUPERUSER_URL"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// A pg_dump able to dump `serverMajor`: `POOPYPALS_TEST_PG_DUMP`, else the one beside the server binaries of
    /// the cluster under test (`POOPYPALS_TEST_PG_BINDIR`, which `make test` sets from `scripts/db.sh bindir`:
    /// the scripts alone know where a cluster's state lives, in the checkout or under /tmp when the `postgres`
    /// user cannot enter it), else the newest of the system's installations (an external `DATABASE_URL`).
    public static func binary(forServerMajor serverMajor: Int) throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["POOPYPALS_TEST_PG_DUMP"], !path.isEmpty { return path }
        var candidates: [(major: Int, path: String)] = []
        var directories: [String] = []
        if let bindir = environment["POOPYPALS_TEST_PG_BINDIR"], !bindir.isEmpty { directories.append(bindir) }
        let system = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        directories += system.map { "/usr/lib/postgresql/\($0)/bin" }
        for directory in directories {
            let path = directory + "/pg_dump"
            guard FileManager.default.isExecutableFile(atPath: path) else { continue }
            let version = try run(path, ["--version"])
            // "pg_dump (PostgreSQL) 18.1"
            if let number = version.split(separator: " ").last?.split(separator: ".").first, let major = Int(number) {
                candidates.append((major, path))
            }
        }
        guard let best = candidates.filter({ $0.major >= serverMajor }).max(by: { $0.major < $1.major }) else {
            throw SetupError("no pg_dump for PostgreSQL \(serverMajor) in \(directories) (set POOPYPALS_TEST_PG_BINDIR or POOPYPALS_TEST_PG_DUMP)")
        }
        return best.path
    }

    /// The whole database as SQL text (schema and data). pg_dump runs on a thread of its own, not on one of
    /// the few cooperative threads other tests need meanwhile.
    public static func dump(database: String, serverMajor: Int) async throws -> String {
        let target = try Superuser.url(database: database)
        return try await withCheckedThrowingContinuation { continuation in
            Thread {
                continuation.resume(with: Result { try run(try binary(forServerMajor: serverMajor), ["--no-owner", "--dbname", target]) })
            }.start()
        }
    }

    private static func run(_ path: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let problem = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw SetupError("\(path) failed: \(String(decoding: problem, as: UTF8.self))")
        }
        return String(decoding: data, as: UTF8.self)
    }
}
