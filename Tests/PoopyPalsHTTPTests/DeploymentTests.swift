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
                                               environment: Self.secrets.merging(["AUTH_JWT_SECRET": secret]) { $1 }, timeout: .seconds(60))
        #expect(output.status == 0, "\(output.stderr)")
        let config = try #require(try Yams.load(yaml: output.stdout) as? [String: Any])
        let services = try #require(config["services"] as? [String: Any])
        #expect(Set(services.keys) == ["db", "migrate", "api"])
        let migrate = try #require(services["migrate"] as? [String: Any])
        let api = try #require(services["api"] as? [String: Any])
        #expect(migrate["command"] as? [String] == ["migrate", "--wait-for-database", "60s"])
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
        // Healthchecks: the database over TCP (a socket check passes during the image's first-time init), the API
        // on /readyz; the API restarts; the migration waits for the database; metrics reachable from the host.
        let dbCheck = (((services["db"] as? [String: Any])?["healthcheck"] as? [String: Any])?["test"] as? [String])?.joined(separator: " ") ?? ""
        #expect(dbCheck.contains("-h 127.0.0.1"), "\(dbCheck)")
        let apiCheck = ((api["healthcheck"] as? [String: Any])?["test"] as? [String])?.joined(separator: " ") ?? ""
        #expect(apiCheck.contains("/readyz"), "\(apiCheck)")
        #expect(api["restart"] as? String == "unless-stopped")
        #expect((migrate["command"] as? [String])?.contains("--wait-for-database") == true)
        #expect((api["environment"] as? [String: Any])?["POOPYPALS_METRICS_HOST"] as? String == "0.0.0.0")
        #expect((api["ports"] as? [Any] ?? []).contains { "\($0)".contains("9464") })
        // Published on loopback only.
        let ports = (api["ports"] as? [Any] ?? []) + ((services["db"] as? [String: Any])?["ports"] as? [Any] ?? [])
        #expect(!ports.isEmpty)
        for port in ports {
            let text = (port as? String) ?? ((port as? [String: Any])?["host_ip"] as? String) ?? ""
            #expect(text.hasPrefix("127.0.0.1"), "\(port)")
        }
    }

    static let secrets = ["POSTGRES_PASSWORD": "pg-\(UUID())", "POOPYPALS_DB_PASSWORD": "app-\(UUID())"]

    /// It rendered the development password and `AUTH_JWT_SECRET: ''` when nothing was set.
    @Test(.enabled(if: compose != nil, "neither `docker compose` nor `docker-compose` is installed"))
    func composeRefusesToRenderWithoutEverySecret() async throws {
        let (tool, prefix) = try #require(Self.compose)
        let all = Self.secrets.merging(["AUTH_JWT_SECRET": String(repeating: "s", count: 40)]) { $1 }
        for missing in all.keys.sorted() {
            var environment = all
            environment[missing] = ""
            let output = try await TestProject.run(prefix + ["-f", "docker-compose.yml", "config", "-q"], executable: tool,
                                                   environment: environment, timeout: .seconds(60))
            #expect(output.status != 0, "\(missing)")
            #expect(output.stderr.contains("set \(missing)"), "\(missing): \(output.stderr)")
        }
        let original = try String(contentsOf: TestProject.root.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        #expect(!original.contains("dev-only") && !original.contains("AUTH_JWT_SECRET:-"))
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
