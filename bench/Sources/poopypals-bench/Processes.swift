import Foundation
import Subprocess
#if canImport(System)
import System
#else
import SystemPackage
#endif

/// Child processes through swift-subprocess, which starts them with an empty signal mask and default signal
/// actions (a child of one of Swift's worker threads would otherwise inherit its blocked signals: pgbench's
/// `-T` timer, SIGALRM, would never fire). Standard error is discarded.
enum Child {
    /// Runs a program (found on PATH unless given as a path) to completion: its exit status (128 + signal when killed) and output.
    static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32, output: String) {
        guard let name = arguments.first else { throw BenchError("no program to run") }
        let executable: Executable = name.contains("/") ? .path(FilePath(name)) : .name(name)
        let result = try await Subprocess.run(executable, arguments: Arguments(Array(arguments.dropFirst())),
                                              environment: .inherit.updating(settings(environment)),
                                              output: .string(limit: 64 << 20), error: .discarded)
        return (status(result.terminationStatus), result.standardOutput)
    }

    /// Runs `binary` while `body` runs, its standard output written to the file `output`; then SIGTERM, and
    /// waits for it to exit.
    static func whileRunning<T: Sendable>(
        _ binary: String, _ arguments: [String], environment: [String: String], output: String,
        _ body: @escaping @Sendable (_ pid: pid_t) async throws -> T
    ) async throws -> T {
        let file = try FileDescriptor.open(FilePath(output), .writeOnly, options: [.create, .truncate],
                                           permissions: [.ownerReadWrite])
        let outcome = try await Subprocess.run(
            .path(FilePath(binary)), arguments: Arguments(arguments), environment: .inherit.updating(settings(environment)),
            input: .none, output: .fileDescriptor(file, closeAfterSpawningProcess: true), error: .discarded
        ) { execution in
            let pid = execution.processIdentifier.value
            do {
                let value = try await body(pid)
                try? execution.send(signal: .terminate)
                return value
            } catch {
                try? execution.send(signal: .terminate)
                throw error
            }
        }
        return outcome.closureResult
    }

    private static func settings(_ environment: [String: String]) -> [Environment.Key: String?] {
        var settings: [Environment.Key: String?] = [:]
        for (key, value) in environment { settings[Environment.Key(stringLiteral: key)] = value }
        return settings
    }

    /// Peak resident memory of a running process so far (VmHWM), in MiB.
    static func peakResidentMiB(of pid: pid_t) -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
              let kib = Double(line.split(separator: " ").dropFirst().first ?? "") else { return nil }
        return kib / 1024
    }

    /// A process's CPU time and context switches (every thread), from `/proc`; `involuntary` are the switches the
    /// kernel made while a thread still had work (another process took the core).
    static func usage(of pid: pid_t) -> (cpuSeconds: Double, switches: Int, involuntary: Int)? {
        guard let fields = statFields(of: "\(pid)"), fields.count > 13, let user = Double(fields[11]),
              let system = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        var switches = 0, involuntary = 0
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        for task in tasks {
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8) else { continue }
            for line in status.split(separator: "\n") where line.hasPrefix("voluntary_ctxt_switches:") || line.hasPrefix("nonvoluntary_ctxt_switches:") {
                let count = Int(line.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
                switches += count
                if line.hasPrefix("nonvoluntary") { involuntary += count }
            }
        }
        return ((user + system) / ticks, switches, involuntary)
    }

    /// The CPU seconds a PostgreSQL server has used so far: its postmaster (`postmaster`, the parent of any
    /// backend: `pg_backend_pid()`'s parent), every child of it still running, and the children it has reaped
    /// (their time is in the postmaster's `cutime`/`cstime`).
    static func postgresCPUSeconds(postmaster: pid_t) -> Double? {
        func times(_ pid: String) -> (parent: pid_t, own: Double, reaped: Double)? {
            // cutime and cstime are fields 16 and 17.
            guard let fields = statFields(of: pid), fields.count > 14, let parent = pid_t(fields[1]),
                  let user = Double(fields[11]), let system = Double(fields[12]),
                  let childUser = Double(fields[13]), let childSystem = Double(fields[14]) else { return nil }
            return (parent, user + system, childUser + childSystem)
        }
        guard let root = times("\(postmaster)") else { return nil }
        var ticks = root.own + root.reaped
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where entry.first?.isNumber == true {
            if let child = times(entry), child.parent == postmaster { ticks += child.own }
        }
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The parent of a running process (`ppid`, field 4 of `/proc/PID/stat`).
    static func parentProcessID(of pid: pid_t) -> pid_t? {
        statFields(of: "\(pid)").flatMap { $0.count > 1 ? pid_t($0[1]) : nil }
    }

    /// The fields of `/proc/PID/stat` after "pid (comm)": `[0]` is the state (field 3), `[1]` the parent (4),
    /// `[11]` and `[12]` utime and stime (14, 15), `[13]` and `[14]` the reaped children's (16, 17).
    private static func statFields(of pid: String) -> [Substring]? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ")
    }

    /// The machine's CPU time so far, all cores: idle (with I/O wait) and total, in ticks (`/proc/stat`).
    static func machineTicks() -> (idle: Int, total: Int)? {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = stat.split(separator: "\n").first, line.hasPrefix("cpu ") else { return nil }
        let values = line.split(separator: " ").dropFirst().compactMap { Int($0) }
        guard values.count >= 5 else { return nil }
        // user nice system idle iowait irq softirq steal (guest time is already in user).
        return (values[3] + values[4], values.prefix(8).reduce(0, +))
    }

    private static func status(_ termination: TerminationStatus) -> Int32 {
        switch termination {
        case .exited(let code): Int32(truncatingIfNeeded: code)
        case .signaled(let signal): 128 + Int32(truncatingIfNeeded: signal)
        }
    }
}
