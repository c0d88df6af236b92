import Foundation
import PoopyPalsData
import PostgresClient

/// Paths and processes of the project under test.
public enum TestProject {
    /// The package root (this file is Tests/TestSupport/TestProject.swift).
    public static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    public static let migrationsDirectory = root.appendingPathComponent("sql")

    /// The built `poopypals` binary: beside the test bundle, or `POOPYPALS_BINARY`.
    public static var binary: URL {
        if let path = ProcessInfo.processInfo.environment["POOPYPALS_BINARY"] { return URL(fileURLWithPath: path) }
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("poopypals")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory.deleteLastPathComponent()
        }
        return root.appendingPathComponent(".build/debug/poopypals")
    }

    /// An executable on PATH, if there is one.
    public static func onPath(_ name: String) -> URL? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return nil
    }

    public struct Output: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String
    }

    /// Runs the CLI (or `executable`) with `arguments` in the package root, waiting at most `timeout` (then, with
    /// `stopAtTimeout`, it is sent SIGTERM and its output returned; else this throws). With `stopWhen`, a server
    /// run until what it said so far (stdout, stderr) shows what the test waits for, then stopped (SIGTERM) and its
    /// output returned; `timeout` then only bounds a wait for what never comes (issue 56: a fixed run time was a
    /// bet on the machine's speed). Its default, 300 s, bounds a hang only: a whole `migrate` under make test's load
    /// is not a thing to time.
    public static func run(
        _ arguments: [String], executable: URL? = nil, environment: [String: String] = [:],
        timeout: Duration = .seconds(300), stopAtTimeout: Bool = false,
        stopWhen: (@Sendable (_ stdout: String, _ stderr: String) -> Bool)? = nil
    ) async throws -> Output {
        let process = Process()
        process.executableURL = executable ?? binary
        process.currentDirectoryURL = root
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["DATABASE_URL"] = nil
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        // `Process.run()` blocks while Foundation sets the child up (its run-loop hand-shake waited seconds under
        // a parallel run): on a thread of its own, not one of the two cooperative ones.
        try await withCheckedThrowingContinuation { (started: CheckedContinuation<Void, any Error>) in
            Thread { started.resume(with: Result { try process.run() }) }.start()
        }
        // Read both pipes while the process runs, so a chatty child never blocks on a full pipe. The reads block,
        // so they get threads of their own rather than two of the few cooperative ones.
        let (out, err) = (Locked(Data()), Locked(Data()))
        async let outRead: Void = drain(stdout.fileHandleForReading, into: out)
        async let errRead: Void = drain(stderr.fileHandleForReading, into: err)
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if let stopWhen, stopWhen(String(decoding: out.value, as: UTF8.self), String(decoding: err.value, as: UTF8.self)) {
                process.terminate()
                break
            }
            if ContinuousClock.now > deadline {
                process.terminate()
                // A server run for a while, then stopped (SIGTERM) to read what it said.
                if stopAtTimeout || stopWhen != nil { break }
                throw SetupError("\(process.executableURL?.lastPathComponent ?? "") \(arguments.joined(separator: " ")) did not finish within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        while process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
        _ = await (outRead, errRead)
        return Output(status: process.terminationStatus,
                      stdout: String(decoding: out.value, as: UTF8.self),
                      stderr: String(decoding: err.value, as: UTF8.self))
    }

    /// Reads `handle` to its end into `buffer`, as it arrives, on a thread of its own (the reads block).
    private static func drain(_ handle: FileHandle, into buffer: Locked<Data>) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread {
                while true {
                    let data = handle.availableData
                    if data.isEmpty { break }
                    buffer.withLock { $0.append(data) }
                }
                continuation.resume()
            }.start()
        }
    }

    /// A folder of migration files for one test, removed by the caller with `FileManager.removeItem`.
    public static func migrationFolder(_ files: [String: String]) throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-mig-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for (name, sql) in files {
            try sql.write(to: folder.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        return folder
    }
}

extension TestDatabase {
    /// A connection URL for this database, for child processes. Test code only: it carries the password
    /// of the test server's URL along. It waits 30 s to connect, as the tests' own pools do (unless the server's URL
    /// says otherwise): the CLI's 10 s ran out once in CI while sixty suites were using the server.
    public var url: String {
        let base = configuration.connectionString ?? ""
        if var components = URLComponents(string: base), components.scheme?.hasPrefix("postgres") == true {
            components.path = "/" + name
            components.waitThirtySecondsToConnect()
            return components.string ?? base
        }
        return base + " dbname=" + name + (base.contains("connect_timeout") ? "" : " connect_timeout=30")
    }
}

extension UUID {
    /// What the database stores for a device with this id (sql/0010): tests that write SQL by hand use it.
    public var deviceKey: UUID { DeviceID.key(of: self) }
}

extension URLComponents {
    /// A `connect_timeout` of 30 s unless the URL sets one: what test logins wait, as the tests' own pools do.
    mutating func waitThirtySecondsToConnect() {
        var items = queryItems ?? []
        if !items.contains(where: { $0.name == "connect_timeout" }) { items.append(URLQueryItem(name: "connect_timeout", value: "30")) }
        queryItems = items
    }
}
