import ArgumentParser
import Foundation
import Values
import Logging
import PoopyPalsData
import PoopyPalsHTTP
import PostgresClient
import NIOCore

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the HTTP API the app calls.",
        discussion: """
            Needs AUTH_JWT_SECRET (HS256, at least 32 characters) unless --dev is given. POOPYPALS_STATEMENT_TIMEOUT \
            (default 5s) and POOPYPALS_LOCK_TIMEOUT (default 2s) bound every statement; POOPYPALS_READ_DATABASE_URL \
            (optional: standbys) serves read-only requests, no older than the Consistency-Token they send; the client gives up on the \
            database after the statement timeout plus POOPYPALS_DEADLINE_MARGIN (default 1s); POOPYPALS_IDLE_TIMEOUT (default \
            30s) closes a connection that sends nothing for that long (idle, or stalled in its headers or body); \
            POOPYPALS_REQUEST_TIMEOUT (default 30s): a request's headers, then its body, must each arrive within it \
            (408 otherwise); POOPYPALS_MAX_CONNECTIONS (default 8192) bounds open connections, \
            POOPYPALS_MAX_CONNECTIONS_PER_ADDRESS (default 256) those of one address; POOPYPALS_MAX_EXPORTS \
            (default 4) bounds exports prepared or read at once, one per device; POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY=1 \
            refuses writes (503) on a server that has no synchronous standby (after a failover, until one follows it); POOPYPALS_MAX_LOGS_PER_DEVICE (default \
            100000) and POOPYPALS_MAX_TOMBSTONES_PER_DEVICE (default 20000) bound what one device stores; \
            POOPYPALS_DEVICE_WRITE_BURST (2000) and POOPYPALS_DEVICE_WRITES_PER_SECOND (20) its log writes, \
            POOPYPALS_REGISTRATION_BURST (30) and POOPYPALS_REGISTRATIONS_PER_HOUR (120) the devices one network \
            (an IPv4 address, an IPv6 /64) registers, POOPYPALS_REGISTRATION_BURST_48 (300) and \
            POOPYPALS_REGISTRATIONS_PER_HOUR_48 (1200) those of an IPv6 /48 (X-Forwarded-For read only from \
            POOPYPALS_TRUSTED_PROXIES); the limit's buckets are keyed by HMAC under POOPYPALS_NETWORK_KEY_SECRET \
            (at least 32 characters; default: derived from AUTH_JWT_SECRET), the same on every instance. SIGTERM or SIGINT: stop \
            accepting, give in-flight requests POOPYPALS_SHUTDOWN_GRACE (default 6s, at most 8s), cancel what \
            still runs on the server, exit 0 within 10 s.
            """)

    @OptionGroup var connection: ConnectionOptions

    @Option(help: "Address to bind (default: $POOPYPALS_HOST, else 127.0.0.1).")
    var host: String?

    @Option(help: "Port (default: $PORT, else 8080; 0 picks a free one).")
    var port: Int?

    @Option(help: "Database connections (default: $POOPYPALS_POOL_SIZE, else 10).")
    var poolSize: Int?

    @Option(help: "Port of the /metrics listener (default: $POOPYPALS_METRICS_PORT, else 9464; 0 picks a free one).")
    var metricsPort: Int?

    @Option(help: "Address the /metrics listener binds (default: $POOPYPALS_METRICS_HOST, else 127.0.0.1; 0.0.0.0 in a container).")
    var metricsHost: String?

    @Flag(help: "Development mode: without AUTH_JWT_SECRET, use a generated secret kept per user (~/.local/state/poopypals/jwt-secret) for `poopypals dev-token`.")
    var dev = false

    func validate() throws {
        if let port, !(0...65535).contains(port) { throw ValidationError("--port must be 0…65535") }
        if let poolSize, !(1...200).contains(poolSize) { throw ValidationError("--pool-size must be 1…200") }
        if let metricsPort, !(0...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be 0…65535") }
    }

    func run() async throws {
        bootstrapLogging()
        let logger = Logger(label: "poopypals.http")
        let environment = ProcessInfo.processInfo.environment
        var database = try connection.configuration()
        // A dead or hung first host of a multi-host URL costs this long before the next is tried (libpq's
        // connect_timeout, per host; the URL's own value wins). The tools keep libpq's 10 s: they are not in a
        // request's path, and a loaded machine can take seconds to accept a login.
        database.connectTimeoutSeconds = 4
        var configuration = APIConfiguration(jwtSecret: try secret(environment, logger: logger), database: database)
        if let networkSecret = environment["POOPYPALS_NETWORK_KEY_SECRET"], !networkSecret.isEmpty {
            guard networkSecret.utf8.count >= 32 else {
                throw CommandFailure("POOPYPALS_NETWORK_KEY_SECRET must be at least 32 characters", status: .checkFailed)
            }
            configuration.networkKeySecret = networkSecret
        }
        if let url = environment["POOPYPALS_READ_DATABASE_URL"], !url.isEmpty {
            var reads = ConnectionConfiguration(connectionString: url, statementCache: database.statementCache)
            reads.connectTimeoutSeconds = database.connectTimeoutSeconds
            do { try reads.checkConnectionString() } catch {
                throw CommandFailure("POOPYPALS_READ_DATABASE_URL: \(error)", status: .checkFailed)
            }
            configuration.readDatabase = reads
        }
        configuration.host = host ?? environment["POOPYPALS_HOST"] ?? "127.0.0.1"
        guard let port = port ?? Int(environment["PORT"] ?? "8080"), (0...65535).contains(port) else { throw CommandFailure("PORT must be 0…65535", status: .checkFailed) }
        configuration.port = port
        guard let size = poolSize ?? Int(environment["POOPYPALS_POOL_SIZE"] ?? "10"), (1...200).contains(size) else {
            throw CommandFailure("POOPYPALS_POOL_SIZE must be 1…200", status: .checkFailed)
        }
        configuration.poolSize = size
        guard let metrics = metricsPort ?? Int(environment["POOPYPALS_METRICS_PORT"] ?? "9464"), (0...65535).contains(metrics) else {
            throw CommandFailure("POOPYPALS_METRICS_PORT must be 0…65535", status: .checkFailed)
        }
        configuration.metricsPort = metrics
        configuration.metricsHost = metricsHost ?? environment["POOPYPALS_METRICS_HOST"].flatMap { $0.isEmpty ? nil : $0 } ?? "127.0.0.1"
        do {
            configuration.tokenRequirements = try TokenRequirements.fromEnvironment(environment)
        } catch {
            throw CommandFailure("\(error)", status: .checkFailed)
        }
        if let text = environment["POOPYPALS_IDLE_TIMEOUT"], !text.isEmpty {
            do { configuration.idleTimeout = try RequestTimeouts.parse(text, name: "POOPYPALS_IDLE_TIMEOUT") } catch { throw CommandFailure("\(error)", status: .checkFailed) }
        }
        if let text = environment["POOPYPALS_REQUEST_TIMEOUT"], !text.isEmpty {
            do { configuration.requestTimeout = try RequestTimeouts.parse(text, name: "POOPYPALS_REQUEST_TIMEOUT") } catch { throw CommandFailure("\(error)", status: .checkFailed) }
        }
        if let text = environment["POOPYPALS_MAX_CONNECTIONS"], !text.isEmpty {
            guard let value = Int(text), (1...100_000).contains(value) else { throw CommandFailure("POOPYPALS_MAX_CONNECTIONS must be 1…100000", status: .checkFailed) }
            configuration.maxConnections = value
        }
        if let text = environment["POOPYPALS_MAX_CONNECTIONS_PER_ADDRESS"], !text.isEmpty {
            guard let value = Int(text), (1...100_000).contains(value) else {
                throw CommandFailure("POOPYPALS_MAX_CONNECTIONS_PER_ADDRESS must be 1…100000", status: .checkFailed)
            }
            configuration.maxConnectionsPerAddress = value
        }
        if let text = environment["POOPYPALS_TRUSTED_PROXIES"], !text.isEmpty {
            let proxies = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard proxies.count <= 64, proxies.allSatisfy({ (try? SocketAddress(ipAddress: $0, port: 0)) != nil }) else {
                throw CommandFailure("POOPYPALS_TRUSTED_PROXIES must be IP addresses separated by commas (64 at most)", status: .checkFailed)
            }
            configuration.trustedProxies = proxies
        }
        if let text = environment["POOPYPALS_SHUTDOWN_GRACE"], !text.isEmpty {
            do { configuration.shutdownGrace = try RequestTimeouts.parse(text, name: "POOPYPALS_SHUTDOWN_GRACE") } catch { throw CommandFailure("\(error)", status: .checkFailed) }
            guard configuration.shutdownGrace <= APIConfiguration.longestShutdownGrace else {
                throw CommandFailure("POOPYPALS_SHUTDOWN_GRACE must be at most \(APIConfiguration.longestShutdownGrace.components.seconds)s (the process exits within 10 s)", status: .checkFailed)
            }
        }
        if let text = environment["POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY"], !text.isEmpty {
            switch text.lowercased() {
            case "1", "true", "on", "yes": configuration.requiresSynchronousStandby = true
            case "0", "false", "off", "no": configuration.requiresSynchronousStandby = false
            default: throw CommandFailure("POOPYPALS_REQUIRE_SYNCHRONOUS_STANDBY must be 1 or 0 (true or false)", status: .checkFailed)
            }
        }
        if let text = environment["POOPYPALS_MAX_EXPORTS"], !text.isEmpty {
            guard let value = Int(text), (1...64).contains(value) else { throw CommandFailure("POOPYPALS_MAX_EXPORTS must be 1…64", status: .checkFailed) }
            configuration.maxExports = value
        }
        do {
            configuration.quotas = try DeviceQuotas.fromEnvironment(environment)
            configuration.rates = try RateLimits.fromEnvironment(environment)
            configuration.timeouts = try RequestTimeouts.fromEnvironment(environment)
        } catch {
            throw CommandFailure("\(error)", status: .checkFailed)
        }
        let host = configuration.host
        let metricsHost = configuration.metricsHost
        DatabaseWatch.start(configuration.database, logger: logger)
        do {
            try await serve(configuration, logger: logger, onListening: { port in
                // Unbuffered, so that a supervisor or test reading the pipe sees it at once.
                FileHandle.standardOutput.write(Data("listening on http://\(host):\(port)\n".utf8))
            }, onMetricsListening: { port in
                FileHandle.standardOutput.write(Data("metrics on http://\(metricsHost):\(port)/metrics\n".utf8))
            })
        } catch let error as ConfigurationError {
            throw CommandFailure("\(error)", status: .checkFailed)
        }
    }

    /// AUTH_JWT_SECRET, or in dev mode a generated one kept in `DevSecret.path`.
    private func secret(_ environment: [String: String], logger: Logger) throws -> String {
        if let secret = environment["AUTH_JWT_SECRET"], !secret.isEmpty { return secret }
        guard dev else {
            throw CommandFailure("AUTH_JWT_SECRET is not set (HS256 secret, at least 32 characters); use --dev for local development", status: .checkFailed)
        }
        let secret = try DevSecret.loadOrCreate()
        logger.warning("dev mode: no AUTH_JWT_SECRET, using the generated secret in \(DevSecret.path); mint tokens with `poopypals dev-token --email you@example.com`")
        return secret
    }
}

/// Says at start whether the database answers, and keeps saying so, with backoff (0.5 s doubling to 30 s), until it
/// does: a stopped database, a wrong password or an unreachable host shows in the log at once, in libpq's words
/// (never the password), not only as /readyz's 503. On a thread of its own: connecting blocks, and the API listens
/// meanwhile (liveness answers; requests get 503 until the database is there).
enum DatabaseWatch {
    static func start(_ configuration: ConnectionConfiguration, logger: Logger) {
        Thread {
            var delay = 0.5
            var attempt = 1
            while true {
                do {
                    _ = try Connection(configuration: configuration)
                    logger.log(level: attempt == 1 ? .info : .notice, "database reachable", metadata: ["attempts": "\(attempt)"])
                    return
                } catch {
                    logger.warning("database not reachable; retrying", metadata: [
                        "attempt": "\(attempt)", "retry_in_s": "\(delay)", "error": "\(error)",
                    ])
                    Thread.sleep(forTimeInterval: delay)
                    delay = min(delay * 2, 30)
                    attempt += 1
                }
            }
        }.start()
    }
}
