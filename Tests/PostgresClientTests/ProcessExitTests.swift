import Foundation
import PostgresClient
import TestSupport
import Testing

/// A process that exits while other threads are inside libpq's connect must exit, not crash. libpq's TLS library
/// (OpenSSL) frees its global locks in an `atexit` handler; a connect that starts after that handler ran and before the
/// process is gone took such a lock and crashed (signal 11, "Bad pointer dereference at 0x18" in
/// `pthread_rwlock_wrlock`): the test process did so after its test run had passed, with a pool still connecting,
/// and a stage of make test failed with no test failed; `poopypals serve` or a CLI command ending while a pool
/// connects would do the same. A separate process (this test bundle, running only the test below) connects on four
/// threads and lets its test end; its exit status is what is checked, twenty times
/// (before the fix about one in ten crashed).
@Suite("Process exit")
struct ProcessExitTests {
    static let childVariable = "POOPYPALS_TEST_EXIT_WHILE_CONNECTING"

    @Test func aProcessThatExitsWhileThreadsConnectExitsCleanly() async throws {
        guard let url = ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty else {
            Issue.record("DATABASE_URL is not set")
            return
        }
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0])
        var endings: [String] = []
        for _ in 0..<20 {
            let child = Process()
            child.executableURL = bundle
            child.arguments = ["--testing-library", "swift-testing", "--filter", "threadsConnectUntilTheProcessExits"]
            child.environment = ProcessInfo.processInfo.environment.merging([Self.childVariable: "1", "DATABASE_URL": url]) { $1 }
            child.standardOutput = FileHandle.nullDevice
            child.standardError = FileHandle.nullDevice
            try child.run()
            // Bounded: a child that hangs is killed and counted as what it is.
            let deadline = ContinuousClock.now + .seconds(120)
            while child.isRunning && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            if child.isRunning {
                child.terminate()
                child.waitUntilExit()
                endings.append("hung (killed after 120 s)")
                continue
            }
            switch child.terminationReason {
            case .exit: endings.append("exit \(child.terminationStatus)")
            case .uncaughtSignal: endings.append("signal \(child.terminationStatus)")
            @unknown default: endings.append("ended \(child.terminationStatus)")
            }
        }
        #expect(endings.allSatisfy { $0 == "exit 0" }, "\(endings)")
    }

    /// What prevents it, in place: libpq here has OpenSSL, told before any use to keep its state at exit.
    @Test func theTLSLibraryKeepsItsStateAtExit() {
        #expect(Connection.tlsLibraryStaysAtExit)
    }

    /// The child's part: runs only in the process the test above starts (the variable set), where it keeps four
    /// threads connecting and disconnecting and returns once they connect, so that the process exits among them.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childVariable] == "1", "the child process of aProcessThatExitsWhileThreadsConnectExitsCleanly"))
    func threadsConnectUntilTheProcessExits() async throws {
        let url = try #require(ProcessInfo.processInfo.environment["DATABASE_URL"])
        let connected = Locked(0)
        for _ in 0..<4 {
            Thread.detachNewThread {
                while true {
                    if let connection = try? Connection(configuration: ConnectionConfiguration(connectionString: url)) {
                        connected.withLock { $0 += 1 }
                        withExtendedLifetime(connection) {}
                    }
                }
            }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while connected.value < 8 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(connected.value >= 8)
    }
}
