import ArgumentParser
import Foundation
import Values
import Logging
import PoopyPalsData
import PoopyPalsHTTP
import PostgresClient

struct DevToken: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dev-token",
        abstract: "Mint a bearer token for local testing (with AUTH_JWT_SECRET, else the --dev secret).")

    @Option(help: "The user's id (default: a new one).")
    var sub: String?

    @Option(help: "The user's email.")
    var email: String

    @Option(help: "Lifetime in seconds (at most AUTH_JWT_MAX_LIFETIME, default 24 h: serve refuses longer ones).")
    var expiresIn = 3600

    func validate() throws {
        if let sub, UUIDText.parse(sub) == nil { throw ValidationError("--sub must be a UUID") }
        guard (1...86_400 * 30).contains(expiresIn) else { throw ValidationError("--expires-in must be 1…2592000 seconds") }
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let secret: String
        if let configured = environment["AUTH_JWT_SECRET"], !configured.isEmpty {
            secret = configured
        } else if let stored = DevSecret.load() {
            secret = stored
        } else {
            throw CommandFailure("no AUTH_JWT_SECRET and no \(DevSecret.path): start `poopypals serve --dev` (or `make run`) first", status: .checkFailed)
        }
        let requirements: TokenRequirements
        do { requirements = try .fromEnvironment(environment) } catch { throw CommandFailure("\(error)", status: .checkFailed) }
        // `serve` refuses a token that expires further ahead than its AUTH_JWT_MAX_LIFETIME: minting one is a mistake.
        guard Duration.seconds(expiresIn) <= requirements.maxLifetime else {
            throw CommandFailure("--expires-in \(expiresIn) is longer than AUTH_JWT_MAX_LIFETIME (\(requirements.maxLifetime.components.seconds) s), which serve accepts", status: .checkFailed)
        }
        let verifier = try await TokenVerifier(secret: secret, requirements: requirements)
        print(try await verifier.mint(userID: sub.flatMap { UUIDText.parse($0) } ?? UUIDText.random(), email: email, expiresIn: TimeInterval(expiresIn)))
    }
}
