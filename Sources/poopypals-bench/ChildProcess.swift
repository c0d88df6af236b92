import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Starts a program with an empty signal mask and default signal actions: a child started from one of Swift's
/// worker threads would otherwise inherit that thread's blocked signals, and pgbench's `-T` timer (SIGALRM)
/// would never fire, nor would a server hear SIGTERM. Standard error goes to /dev/null.
private func spawn(_ arguments: [String], environment: [String: String]? = nil,
                   redirect: (inout posix_spawn_file_actions_t) -> Void) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    redirect(&actions)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)

    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    var all = sigset_t()
    sigfillset(&all)
    posix_spawnattr_setsigmask(&attributes, &empty)
    posix_spawnattr_setsigdefault(&attributes, &all)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    let argv = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
    defer { envp?.forEach { free($0) } }
    var pid = pid_t()
    let status = envp.map { posix_spawnp(&pid, arguments[0], &actions, &attributes, argv, $0) }
        ?? posix_spawnp(&pid, arguments[0], &actions, &attributes, argv, environ)
    guard status == 0 else { throw BenchError("cannot start \(arguments[0]) (is it installed?)") }
    return pid
}

/// Runs a program to completion and returns its exit status and standard output.
func runChild(_ arguments: [String]) throws -> (status: Int32, output: String) {
    var pipe: [Int32] = [0, 0]
    guard Glibc.pipe(&pipe) == 0 else { throw BenchError("pipe failed") }
    let pid: pid_t
    do {
        pid = try spawn(arguments) { actions in
            posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
            posix_spawn_file_actions_addclose(&actions, pipe[0])
        }
    } catch {
        close(pipe[0])
        close(pipe[1])
        throw error
    }
    close(pipe[1])
    let output = FileHandle(fileDescriptor: pipe[0], closeOnDealloc: true).readDataToEndOfFile()
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    let exited = (status & 0x7f) == 0
    return (exited ? (status >> 8) & 0xff : 128 + (status & 0x7f), String(decoding: output, as: UTF8.self))
}

/// A child running in the background, its standard output written to a file.
struct BackgroundChild {
    let pid: pid_t

    static func start(_ arguments: [String], environment: [String: String], output: String) throws -> BackgroundChild {
        BackgroundChild(pid: try spawn(arguments, environment: environment) { actions in
            posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        })
    }

    /// Peak resident memory so far (VmHWM), in MiB.
    var peakResidentMiB: Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
              let kib = Double(line.split(separator: " ").dropFirst().first ?? "") else { return nil }
        return kib / 1024
    }

    /// SIGTERM, then waits (at most 15 s) and returns the exit status.
    func stop() -> Int32 {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<300 {
            if waitpid(pid, &status, WNOHANG) == pid { return (status >> 8) & 0xff }
            usleep(50_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
        return -1
    }
}
