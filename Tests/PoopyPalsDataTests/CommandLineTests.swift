import Foundation
import Testing
import TestSupport

/// CLI papercuts an operator met: no --version, and dev-token looking for the secret under the current folder.
@Suite("The command line") struct CommandLineTests {
    @Test func versionIsPrintedAndIsTheAPIsVersion() async throws {
        let output = try await TestProject.run(["--version"])
        #expect(output.status == 0)
        let spec = try String(contentsOf: TestProject.root.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        let version = spec.split(separator: "\n").first { $0.hasPrefix("  version: ") }.map { $0.dropFirst(11) } ?? ""
        #expect(!version.isEmpty)
        #expect(output.stdout.split(separator: "\n").first.map(String.init) == "poopypals \(version)")
    }

    /// `serve --dev` keeps its generated secret per user, where `dev-token` finds it from any folder (it read
    /// `.dev/jwt-secret` under the current one, and said "start poopypals serve --dev first" while it ran).
    @Test func devTokenFindsTheSecretServeDevWroteFromAnyFolder() async throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-home-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: home) }
        let environment = ["HOME": home.path, "XDG_STATE_HOME": "", "AUTH_JWT_SECRET": "", "POOPYPALS_DEV_SECRET_FILE": ""]
        let secretFile = home.appendingPathComponent(".local/state/poopypals/jwt-secret")

        let before = try await TestProject.run(["dev-token", "--email", "a@example.com"], environment: environment)
        #expect(before.status == 2)
        #expect(before.stderr.contains(secretFile.path))

        // serve --dev writes the secret at start, then listens; stopped once it says so (a fixed 10 s was a bet
        // on the machine: a loaded one running the whole suite once needed more than 3 s to get that far).
        let served = try await TestProject.run(["serve", "--dev", "--port", "0", "--metrics-port", "0",
                                                "--database-url", "postgresql://nobody@127.0.0.1:1/none"],
                                               environment: environment, timeout: .seconds(120),
                                               stopWhen: { stdout, _ in stdout.contains("listening on") })
        #expect(served.stdout.contains("listening on"), "\(served.stderr)")
        let attributes = try FileManager.default.attributesOfItem(atPath: secretFile.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)

        let token = try await TestProject.run(["dev-token", "--email", "a@example.com"], environment: environment)
        #expect(token.status == 0, "\(token.stderr)")
        #expect(token.stdout.split(separator: ".").count == 3)
    }

    /// `postgresql//user@host/db` (a colon lost) was read by libpq as a database name: `serve` said "listening" on
    /// the local socket's default. Every command now refuses such a URL at start, with exit 2 and no password.
    @Test(arguments: ["postgresql//nobody:Sup3rSecretPw@127.0.0.1:1/none", "https://nobody:Sup3rSecretPw@127.0.0.1/none",
                      "nobody:Sup3rSecretPw@127.0.0.1/none", "host=127.0.0.1 password=Sup3rSecretPw 'unterminated"])
    func aMalformedDatabaseURLIsRefusedAtStart(_ url: String) async throws {
        for command in [["serve", "--port", "0", "--metrics-port", "0"], ["migrate", "status"], ["monitor", "duplicate-emails"]] {
            let output = try await TestProject.run(command + ["--database-url", url], environment: ["AUTH_JWT_SECRET": String(repeating: "s", count: 40)],
                                                   timeout: .seconds(120))  // a bound for a hang: a loaded machine took over 20 s once (issue 56)
            #expect(output.status == 2, "\(command) \(url)")
            #expect(output.stderr.contains("the database URL is malformed"), "\(command): \(output.stderr)")
            #expect(!output.stderr.contains("Sup3rSecretPw") && !output.stdout.contains("Sup3rSecretPw"))
            #expect(!output.stdout.contains("listening"))
        }
    }

    /// `serve` printed "listening" and nothing else with the database down or a wrong password; only /readyz said
    /// 503. It now says at start, in libpq's words and without the password, and keeps retrying with backoff.
    @Test func serveSaysAtStartWhenTheDatabaseCannotBeReached() async throws {
        let output = try await TestProject.run(["serve", "--port", "0", "--metrics-port", "0",
                                                "--database-url", "postgresql://nobody:Sup3rSecretPw@127.0.0.1:1/none?connect_timeout=2"],
                                               environment: ["AUTH_JWT_SECRET": String(repeating: "s", count: 40)],
                                               timeout: .seconds(120), stopWhen: { stdout, stderr in  // once it has said it twice
            stdout.contains("listening on") && stderr.components(separatedBy: "database not reachable; retrying").count > 2
        })
        #expect(output.stdout.contains("listening on"))  // liveness still answers meanwhile
        let warnings = output.stderr.split(separator: "\n").filter { $0.contains("database not reachable; retrying") }
        #expect(warnings.count >= 2, "\(output.stderr)")
        #expect(warnings.first?.contains("Connection refused") == true)
        #expect(!output.stderr.contains("Sup3rSecretPw"))
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment["DATABASE_URL"]?.hasPrefix("postgresql://") == true))
    func serveSaysAtStartWhenThePasswordIsWrong() async throws {
        var url = try #require(URLComponents(string: ProcessInfo.processInfo.environment["DATABASE_URL"] ?? ""))
        url.password = "Wr0ngPassw0rd"
        // 30 s to log in: serve's own 4 s, outlived under load, would make the first warning "timeout expired".
        url.queryItems = (url.queryItems ?? []).filter { $0.name != "connect_timeout" } + [URLQueryItem(name: "connect_timeout", value: "30")]
        let output = try await TestProject.run(["serve", "--port", "0", "--metrics-port", "0", "--database-url", try #require(url.string)],
                                               environment: ["AUTH_JWT_SECRET": String(repeating: "s", count: 40)],
                                               timeout: .seconds(120), stopWhen: { _, stderr in stderr.contains("database not reachable; retrying") })
        let warning = output.stderr.split(separator: "\n").first { $0.contains("database not reachable; retrying") }
        #expect(warning?.contains("password authentication failed") == true, "\(output.stderr)")
        #expect(!output.stderr.contains("Wr0ngPassw0rd"))
    }
}
