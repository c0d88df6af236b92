import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import TestSupport
import Testing

/// The real application, in this process, on a free port of 127.0.0.1, over a test database.
struct LiveAPI: Sendable {
    static let secret = "test-secret-0123456789abcdef-0123456789"

    let base: URL
    /// The separate `/metrics` listener.
    let metricsBase: URL
    let logs: Locked<[String]>
    private let task: Task<Void, any Error>

    typealias Reply = HTTPReply

    /// Starts the app on `db` (or on any configuration), returns once it listens.
    static func start(_ database: ConnectionConfiguration, poolSize: Int = 8,
                      configure: @Sendable (inout APIConfiguration) -> Void = { _ in }) async throws -> LiveAPI {
        CapturedLogs.install()
        let lines = Locked<[String]>([])
        let logger = Logger(label: "poopypals.http") { label in LineCapturingHandler(label: label, lines: lines) }
        var configuration = APIConfiguration(jwtSecret: secret, database: database)
        configuration.port = 0
        configuration.poolSize = poolSize
        configuration.metricsPort = 0
        // A device's requests beyond its 2 at the database wait 30 s here, not production's 3 s: under make test's load
        // ten requests of one device once queued longer than 3 s (CI of stop 51: a 429 `device_busy` among fifty
        // profile requests). The wait itself is tested with its own setting (RobustPathTests).
        configuration.deviceWait = .seconds(30)
        // The same for a connection (production: 3 s), a row lock (2 s) and a statement (5 s): limits a loaded
        // machine can reach with requests that are merely slow there (issue 56). The tests of each limit set it.
        configuration.acquireTimeout = .seconds(30)
        configuration.timeouts = RequestTimeouts(statement: .seconds(30), lock: .seconds(30))
        configure(&configuration)
        let port = Locked<Int?>(nil)
        let metricsPort = Locked<Int?>(nil)
        let application = try await buildApplication(configuration, logger: logger,
                                                     onListening: { bound in port.withLock { $0 = bound } },
                                                     onMetricsListening: { bound in metricsPort.withLock { $0 = bound } })
        let task = Task { try await application.run() }
        // Generous: 60 suites share two cores in `make test`, and a start that is merely slow there is not a failure.
        let deadline = ContinuousClock.now + .seconds(30)
        while port.value == nil || metricsPort.value == nil {
            guard ContinuousClock.now < deadline else { throw SetupError("the API did not start listening") }
            try await Task.sleep(for: .milliseconds(10))
        }
        return LiveAPI(base: try #require(URL(string: "http://127.0.0.1:\(port.value ?? 0)")),
                       metricsBase: try #require(URL(string: "http://127.0.0.1:\(metricsPort.value ?? 0)")), logs: lines, task: task)
    }

    func stop() async {
        task.cancel()
        _ = try? await task.value
    }

    /// GET on the metrics listener.
    func metrics() async throws -> Reply {
        try await send("GET", "/metrics", on: metricsBase)
    }

    /// One request. The client waits 60 s, longer than any wait the server bounds itself (its request timeout and the
    /// tests' device wait, 30 s each): a server slow under make test's load is not a failure, one that never answers
    /// is. With TestHTTP's 15 s, a rate-limit test's request once went unanswered in time (CI of 1a04b8f).
    func send(_ method: String, _ path: String, device: UUID? = nil, token: String? = nil,
              headers: [String: String] = [:], json: String? = nil, body: Data? = nil, on host: URL? = nil,
              timeout: TimeInterval = 60) async throws -> Reply {
        var fields = headers
        if let device { fields["X-Device-ID"] = device.uuidString.lowercased() }
        if let token { fields["Authorization"] = "Bearer \(token)" }
        return try await TestHTTP.send(method, try #require(URL(string: path, relativeTo: host ?? base)), headers: fields, json: json, body: body,
                                   timeout: timeout)
    }

    /// `/readyz` asked again until it answers `status` (30 s at most), then its last reply. Readiness gives its
    /// database and schema checks a fixed 3 s and 1 s, after which the last answer stands: right for a probe, and a
    /// bet on the machine's speed for a test that changed the database just before (issue 56). What the test asserts
    /// is the answer it waits for, and the reply's fields.
    func readyz(until status: Int, within patience: Duration = .seconds(30)) async throws -> Reply {
        let deadline = ContinuousClock.now + patience
        while true {
            let reply = try await send("GET", "/readyz")
            if reply.status == status || ContinuousClock.now >= deadline { return reply }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// A token as the auth provider would mint it.
    func token(user: UUID = UUID(), email: String = "chris@example.com", expiresIn: TimeInterval = 600,
               notBefore: Date? = nil, issuer: String? = nil, audience: String? = nil) async throws -> String {
        try await TokenVerifier(secret: Self.secret).mint(userID: user, email: email, expiresIn: expiresIn, notBefore: notBefore,
                                                          issuer: issuer, audience: audience)
    }
}

extension TestDatabase {
    /// A migrated database with the API running on it.
    static func withAPI<T: Sendable>(poolSize: Int = 8, configure: @escaping @Sendable (inout APIConfiguration) -> Void = { _ in },
                                     _ body: @Sendable (LiveAPI, TestDatabase) async throws -> T) async throws -> T {
        try await withMigrated { db in
            let api = try await LiveAPI.start(db.configuration, poolSize: poolSize, configure: configure)
            do {
                let value = try await body(api, db)
                await api.stop()
                return value
            } catch {
                await api.stop()
                throw error
            }
        }
    }
}

/// HS256 over arbitrary header and payload, for forging tokens that jwt-kit would not make.
enum ForgedToken {
    static func base64URL(_ data: Data) -> String {
        Base64URL.encode(data)
    }

    static func make(header: String, payload: String, secret: String, signature: String? = nil) -> String {
        let input = base64URL(Data(header.utf8)) + "." + base64URL(Data(payload.utf8))
        return input + "." + (signature ?? base64URL(hmacSHA256(key: Array(secret.utf8), message: Array(input.utf8))))
    }

    static func hmacSHA256(key: [UInt8], message: [UInt8]) -> Data {
        Data(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)))
    }
}
