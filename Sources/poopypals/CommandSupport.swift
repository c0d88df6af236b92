import ArgumentParser
import Foundation
import Logging
import PoopyPalsData
import PostgresClient

/// Where the database is. Shared by every command that connects.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "PostgreSQL URI or key=value string (default: $DATABASE_URL, else libpq's PG* variables).",
        valueName: "url"))
    var databaseURL: String?

    /// The configuration, or exit 2 naming what is wrong with a malformed URL (never its password).
    var configuration: ConnectionConfiguration {
        let configuration = ConnectionConfiguration.resolve(databaseURL: databaseURL)
        do { try configuration.checkConnectionString() } catch { fail("\(error)", status: .checkFailed) }
        return configuration
    }

    /// Connects, or exits with status 2 and libpq's reason (never the password). With `wait`, a failed first
    /// connection is tried again with backoff (0.5 s, doubling to 5 s) until `wait` has passed, saying so on stderr:
    /// a container started beside its database.
    func connect(waitingUpTo wait: Duration = .zero) throws -> Connection {
        bootstrapLogging()
        let deadline = ContinuousClock.now + wait
        var delay = Duration.milliseconds(500)
        var attempt = 1
        while true {
            do {
                return try Connection(configuration: configuration)
            } catch {
                let now = ContinuousClock.now
                guard now + delay <= deadline else { fail("\(error)", status: .checkFailed) }
                FileHandle.standardError.write(Data("waiting for the database (attempt \(attempt) failed: \(error)); trying again in \(delay)\n".utf8))
                Thread.sleep(forTimeInterval: Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
                delay = min(delay * 2, .seconds(5))
                attempt += 1
            }
        }
    }
}

/// Exit statuses shared by every command, so cron jobs and checks can rely on them.
enum ExitStatus: Int32 {
    case ok = 0
    /// The answer is "no": pending migrations, a refused or failed run.
    case problem = 1
    /// The question could not be answered: database unreachable, bad configuration.
    case checkFailed = 2
}

func fail(_ message: String, status: ExitStatus) -> Never {
    FileHandle.standardError.write(Data("error: \(message)\n".utf8))
    exit(status.rawValue)
}

/// Duration arguments: `5s`, `500ms`, `2m`, or plain seconds.
struct DurationArgument: ExpressibleByArgument {
    let duration: Duration
    /// As written, for help texts ("default: 5s", not the struct's dump).
    let text: String

    /// At most a day: a larger value is a typo, and `Int64(value * 1000)` of an infinite or huge value would trap.
    static let maximumMilliseconds = 86_400_000.0

    init?(argument: String) {
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60)]
        var milliseconds: Double?
        for (suffix, scale) in units where argument.hasSuffix(suffix) {
            milliseconds = Double(argument.dropLast(suffix.count)).map { $0 * scale * 1000 }
            break
        }
        if milliseconds == nil, !argument.hasSuffix("s"), !argument.hasSuffix("m") { milliseconds = Double(argument).map { $0 * 1000 } }
        guard let milliseconds, milliseconds.isFinite, (0...Self.maximumMilliseconds).contains(milliseconds) else { return nil }
        duration = .milliseconds(Int64(milliseconds))
        text = argument
    }

    var defaultValueDescription: String { text }
}

private let logging: Void = {
    let level = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0.lowercased()) } ?? .info
    // Every line written while a request runs names it (`RequestTrace`, set by the HTTP layer): computed only
    // for lines that are written.
    let requestID = Logger.MetadataProvider { RequestTrace.id.map { ["request_id": "\($0)"] } ?? [:] }
    LoggingSystem.bootstrap({ label, provider in
        var handler = StreamLogHandler.standardError(label: label, metadataProvider: provider)
        handler.logLevel = level
        return handler
    }, metadataProvider: requestID)
}()

/// Sends logs to stderr (stdout is for results), at `LOG_LEVEL` (default info). Safe to call repeatedly.
func bootstrapLogging() { _ = logging }
