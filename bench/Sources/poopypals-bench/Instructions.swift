import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Server instructions per request, counted by valgrind's callgrind: a count, not a time, so that a change to the
/// request path is measured without the machine's noise. (`perf stat -e instructions` needs hardware counters,
/// which virtual machines such as this one do not expose: it reports "<not supported>".)
struct InstructionRow: Encodable {
    let server: String
    let route: String
    let connections: Int
    let requests: Int
    let instructionsPerRequest: Double
}

enum InstructionCount {
    static let connections = 4

    /// Ours and the peer, each started under callgrind; warmed up, then for each route: the counts zeroed, `wrk` for `seconds`, a dump, its total over the requests `wrk` completed. Everything runs about 50
    /// times slower under valgrind, so a few hundred requests per route are enough for a stable count.
    static func run(serverBinary: String, peerBinary: String?, databaseURL: String, seconds: Int, devices: Int) async throws -> [InstructionRow] {
        guard let valgrind = valgrind() else {
            print("instruction counts skipped: valgrind is not installed (Debian: apt-get install valgrind)")
            return []
        }
        let tools = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-callgrind-tools-\(getpid())")
        try FileManager.default.createDirectory(at: tools, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: tools) }
        var peer: String? = nil
        if let peerBinary { peer = try await withoutDebugInfo(peerBinary, in: tools) }
        guard let shim = try await sigsuspendShim(in: tools), let server = try await withoutDebugInfo(serverBinary, in: tools),
              peerBinary == nil || peer != nil
        else {
            print("instruction counts skipped: cc and objcopy are needed (Debian: apt-get install gcc binutils)")
            return []
        }
        let port = 19080 + Int.random(in: 0..<1000)
        var servers: [(name: String, binary: String, arguments: [String], environment: [String: String], port: Int)] = [
            ("poopypals", server, ["serve", "--port", "\(port)", "--pool-size", "16"],
             ["DATABASE_URL": databaseURL, "AUTH_JWT_SECRET": String(repeating: "b", count: 40), "LOG_LEVEL": "warning", "LD_PRELOAD": shim], port),
        ]
        if let peer {
            servers.append((HTTPLoad.peerName, peer, ["--serve-peer", "\(port + 1)"], ["DATABASE_URL": databaseURL, "LD_PRELOAD": shim], port + 1))
        }
        var rows: [InstructionRow] = []
        for server in servers {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-callgrind-\(server.port)")
            try? FileManager.default.removeItem(at: directory)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let log = directory.appendingPathComponent("server.log").path
            let out = directory.appendingPathComponent("callgrind.out").path
            rows += try await Child.whileRunning(valgrind, ["--tool=callgrind", "--callgrind-out-file=\(out)",
                                                            server.binary] + server.arguments,
                                                 environment: server.environment, output: log) { pid in
                try await measure(server.name, pid: pid, port: server.port, directory: directory, seconds: seconds, devices: devices)
            }
        }
        return rows
    }

    private static func measure(_ name: String, pid: pid_t, port: Int, directory: URL, seconds: Int, devices: Int) async throws -> [InstructionRow] {
        let deadline = ContinuousClock.now + .seconds(120)
        // The log line may sit in a buffer (the peer's standard output is a file): a connection tells.
        while !acceptsConnections(port: port) {
            guard ContinuousClock.now < deadline else { throw BenchError("\(name) under valgrind did not start listening within 120 s") }
            try await Task.sleep(for: .milliseconds(200))
        }
        var rows: [InstructionRow] = []
        var warmedEveryDevice = false
        for (route, script) in HTTPLoad.scripts(devices: devices) {
            let file = directory.appendingPathComponent("load.lua")
            try script.write(to: file, atomically: true, encoding: .utf8)
            func wrk(seconds: Int) -> [String] {
                ["wrk", "-t", "1", "-c", "\(connections)", "-d", "\(seconds)s", "-s", file.path, "http://127.0.0.1:\(port)"]
            }
            // Warm up (lazy symbol binding, connections, prepared statements), uncounted.
            _ = try await Child.run(wrk(seconds: 3))
            // And every device once, so that what is counted is steady state: a device's first request to an instance
            // also looks up its kept id (one more statement and round trip, `KeptDeviceIDs`), and 3 s of random
            // devices under valgrind reach only some of them, so the GETs (counted first) included first ones (issue 59).
            if !warmedEveryDevice {
                // (curl, one connection, a request per device: wrk cannot stop after a number of requests.)
                let everyDevice = directory.appendingPathComponent("every-device.curl")
                try HTTPLoad.everyDeviceOnce(devices: devices, port: port).write(to: everyDevice, atomically: true, encoding: .utf8)
                let (status, output) = try await Child.run(["curl", "-s", "--max-time", "600", "-K", everyDevice.path])
                let answered = output.split(separator: "\n").filter { $0 == "200" }.count
                guard status == 0, answered == devices else {
                    throw BenchError("the warm-up of every device: \(answered) of \(devices) GETs answered 200 (curl exited with \(status))")
                }
                warmedEveryDevice = true
            }
            try await control(["-z", "\(pid)"])
            let (status, output) = try await Child.run(wrk(seconds: seconds))
            guard status == 0 else { throw BenchError("wrk exited with \(status)") }
            try await control(["-d", "\(pid)"])
            let requests = HTTPLoad.completedRequests(in: output)
            guard requests > 0 else { throw BenchError("no request completed under valgrind (\(name), \(route))") }
            let total = try latestDumpTotal(in: directory)
            let row = InstructionRow(server: name, route: route, connections: connections, requests: requests,
                                     instructionsPerRequest: Double(total) / Double(requests))
            print(String(format: "instructions: %@ %@: %.0f per request (%d requests)", name, route, row.instructionsPerRequest, requests))
            rows.append(row)
        }
        return rows
    }

    /// valgrind's path, when it and callgrind's tools are installed.
    static func valgrind() -> String? {
        let directories = ["/usr/bin", "/usr/local/bin"]
        guard let directory = directories.first(where: { FileManager.default.isExecutableFile(atPath: $0 + "/valgrind") }),
              directories.contains(where: { FileManager.default.isExecutableFile(atPath: $0 + "/callgrind_control") })
        else { return nil }
        return directory + "/valgrind"
    }

    /// Valgrind 3.19 (Debian 12) cannot read the DWARF 5 of Swift 6's binaries ("Possibly corrupted debuginfo
    /// file"): it runs a copy without debug information (the symbol table stays, so profiles still name functions).
    static func withoutDebugInfo(_ binary: String, in directory: URL) async throws -> String? {
        let copy = directory.appendingPathComponent(URL(fileURLWithPath: binary).lastPathComponent + "-\(UUID().uuidString.prefix(8))").path
        let (status, _) = try await Child.run(["objcopy", "--strip-debug", binary, copy])
        return status == 0 ? copy : nil
    }

    /// Valgrind 3.19 writes into the signal mask `rt_sigsuspend` is given, and libdispatch's signal thread passes
    /// one in read-only memory: valgrind dies of SIGSEGV as the server starts. Preloaded, this `sigsuspend` hands
    /// the kernel a copy on the stack.
    static func sigsuspendShim(in directory: URL) async throws -> String? {
        let source = directory.appendingPathComponent("sigsuspend.c")
        let library = directory.appendingPathComponent("libsigsuspend.so").path
        try """
            #define _GNU_SOURCE
            #include <signal.h>
            #include <unistd.h>
            #include <sys/syscall.h>
            int sigsuspend(const sigset_t *mask) {
                sigset_t copy = *mask;
                return (int)syscall(SYS_rt_sigsuspend, &copy, 8);
            }
            """.write(to: source, atomically: true, encoding: .utf8)
        let (status, _) = try await Child.run(["cc", "-shared", "-fPIC", "-O2", "-o", library, source.path])
        return status == 0 ? library : nil
    }

    /// Whether something accepts a TCP connection on 127.0.0.1:`port`.
    private static func acceptsConnections(port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return false }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    private static func control(_ arguments: [String]) async throws {
        let (status, output) = try await Child.run(["callgrind_control"] + arguments)
        guard status == 0 else { throw BenchError("callgrind_control \(arguments.joined(separator: " ")) exited with \(status): \(output)") }
    }

    /// The instructions of the newest dump: those executed since the last zeroing.
    private static func latestDumpTotal(in directory: URL) throws -> Int {
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: [.contentModificationDateKey])
            .filter { $0.lastPathComponent.hasPrefix("callgrind.out") }
        guard let newest = try files.max(by: {
            try $0.resourceValues(forKeys: [.contentModificationDateKey]).contentModificationDate ?? .distantPast
                < $1.resourceValues(forKeys: [.contentModificationDateKey]).contentModificationDate ?? .distantPast
        }) else { throw BenchError("callgrind wrote no dump") }
        // Its `totals:` line, checked against the functions' own counts (`CallgrindProfile`): the `summary:` line
        // can differ from it (by 1 % in a server dump, by half in a dump taken at `--dump-before`).
        let total = try CallgrindProfile(parsing: String(contentsOf: newest, encoding: .utf8)).total
        // `BENCH_KEEP_DUMPS=DIR` keeps each dump there, for `callgrind_annotate` (where the instructions go).
        if let keep = ProcessInfo.processInfo.environment["BENCH_KEEP_DUMPS"], !keep.isEmpty {
            try FileManager.default.createDirectory(atPath: keep, withIntermediateDirectories: true)
            let kept = URL(fileURLWithPath: keep).appendingPathComponent(newest.deletingLastPathComponent().lastPathComponent + "-" + newest.lastPathComponent)
            try? FileManager.default.removeItem(at: kept)
            try FileManager.default.copyItem(at: newest, to: kept)
        }
        try FileManager.default.removeItem(at: newest)
        return total
    }
}

