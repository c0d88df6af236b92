import Foundation
import Testing
import TestSupport
import Yams

/// docker-compose.yml as Compose itself reads it (`config`: no engine needed). Needs `docker compose` or
/// `docker-compose` (Debian's package; `.ci/run` installs it); without either, scripts/test.sh says NOT RUN.
@Suite("Deployment files") struct DeploymentTests {
    /// The Compose command and its leading arguments, or nil.
    static let compose: (URL, [String])? = {
        if let docker = TestProject.onPath("docker"), ProcessRunner.succeeds(docker, ["compose", "version"]) {
            return (docker, ["compose"])
        }
        return TestProject.onPath("docker-compose").map { ($0, []) }
    }()

    @Test(.enabled(if: compose != nil, "neither `docker compose` nor `docker-compose` is installed"))
    func composeStartsDatabaseThenMigrationThenAPIAsANonSuperuser() async throws {
        let (tool, prefix) = try #require(Self.compose)
        let secret = String(repeating: "s", count: 40)
        let output = try await TestProject.run(prefix + ["-f", "docker-compose.yml", "config"], executable: tool,
                                               environment: ["AUTH_JWT_SECRET": secret], timeout: .seconds(60))
        #expect(output.status == 0, "\(output.stderr)")
        let config = try #require(try Yams.load(yaml: output.stdout) as? [String: Any])
        let services = try #require(config["services"] as? [String: Any])
        #expect(Set(services.keys) == ["db", "migrate", "api"])
        let migrate = try #require(services["migrate"] as? [String: Any])
        let api = try #require(services["api"] as? [String: Any])
        #expect(migrate["command"] as? [String] == ["migrate"])
        #expect(api["command"] as? [String] == ["serve"])
        // Order: the database is healthy, then the migrations ran to the end, then the API starts.
        #expect(Self.condition(migrate, on: "db") == "service_healthy")
        #expect(Self.condition(api, on: "migrate") == "service_completed_successfully")
        // The service and the migrations log in as the non-superuser owner: a superuser would bypass RLS.
        for service in [migrate, api] {
            let environment = service["environment"] as? [String: Any]
            let url = try #require(environment?["DATABASE_URL"] as? String)
            #expect(URLComponents(string: url)?.user == "poopypals")
        }
        #expect((api["environment"] as? [String: Any])?["AUTH_JWT_SECRET"] as? String == secret)
        // Published on loopback only.
        let ports = (api["ports"] as? [Any] ?? []) + ((services["db"] as? [String: Any])?["ports"] as? [Any] ?? [])
        #expect(!ports.isEmpty)
        for port in ports {
            let text = (port as? String) ?? ((port as? [String: Any])?["host_ip"] as? String) ?? ""
            #expect(text.hasPrefix("127.0.0.1"), "\(port)")
        }
    }

    @Test(.enabled(if: compose != nil, "neither `docker compose` nor `docker-compose` is installed"))
    func composeRefusesAnInvalidFile() async throws {
        // The check above can fail: Compose rejects what it does not understand.
        let (tool, prefix) = try #require(Self.compose)
        let original = try String(contentsOf: TestProject.root.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        let broken = original.replacingOccurrences(of: "service_healthy", with: "service_happy")
        #expect(broken != original)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("compose-\(UUID().uuidString).yml")
        try broken.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let output = try await TestProject.run(prefix + ["-f", file.path, "--project-directory", TestProject.root.path, "config", "-q"],
                                               executable: tool, timeout: .seconds(60))
        #expect(output.status != 0)
    }

    static func condition(_ service: [String: Any], on other: String) -> String? {
        ((service["depends_on"] as? [String: Any])?[other] as? [String: Any])?["condition"] as? String
    }
}

/// A quick synchronous probe, for test traits (which cannot await).
enum ProcessRunner {
    static func succeeds(_ executable: URL, _ arguments: [String]) -> Bool {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}
