import ArgumentParser
import Foundation
import Logging
import PoopyPalsHTTP
import PoopyPalsData
import PostgresClient
import Values

/// Where the database is. Shared by every command that connects.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "PostgreSQL URI or key=value string (default: $DATABASE_URL, else libpq's PG* variables).",
        valueName: "url"))
    var databaseURL: String?

    /// The configuration, or exit 2 naming what is wrong with a malformed URL (never its password).
    func configuration() throws -> ConnectionConfiguration {
        let configuration = ConnectionConfiguration.resolve(databaseURL: databaseURL, environment: ProcessInfo.processInfo.environment)
        do { try configuration.checkConnectionString() } catch { throw CommandFailure("\(error)", status: .checkFailed) }
        return configuration
    }

    /// Connects, or exits with status 2 and libpq's reason (never the password). With `wait`, a failed first
    /// connection is tried again with backoff (0.5 s, doubling to 5 s) until `wait` has passed, saying so on stderr:
    /// a container started beside its database.
    func connect(waitingUpTo wait: Duration = .zero) throws -> Connection {
        bootstrapLogging()
        let configuration = try configuration()
        let deadline = ContinuousClock.now + wait
        var delay = Duration.milliseconds(500)
        var attempt = 1
        while true {
            do {
                return try Connection(configuration: configuration)
            } catch {
                let now = ContinuousClock.now
                guard now + delay <= deadline else { throw CommandFailure("\(error)", status: .checkFailed) }
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

/// The one way a command ends with a status other than 0: thrown, and turned into the exit status by
/// `PoopyPals.main` (which writes `error: <message>` to stderr first when there is one), after every `defer` of the
/// command has run — an `exit()` in the middle of a command skipped them.
struct CommandFailure: Error {
    let message: String?
    let status: ExitStatus

    init(_ message: String? = nil, status: ExitStatus) {
        self.message = message
        self.status = status
    }
}

/// Duration arguments, in the project's one grammar (`DurationText`: `5s`, `500ms`, `1.5s`, `2m`; a unit required).
struct DurationArgument: ExpressibleByArgument {
    let duration: Duration
    /// As written, for help texts ("default: 5s", not the struct's dump).
    let text: String

    /// At most a day: a larger value is a typo.
    static let maximum = Duration.seconds(86_400)

    init?(argument: String) {
        guard let duration = DurationText.parse(argument), duration <= Self.maximum else { return nil }
        self.duration = duration
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
        var handler = DeferredMetadataLogHandler(StreamLogHandler.standardError(label: label, metadataProvider: provider))
        handler.logLevel = level
        return handler
    }, metadataProvider: requestID)
}()

/// Sends logs to stderr (stdout is for results), at `LOG_LEVEL` (default info). Safe to call repeatedly.
func bootstrapLogging() { _ = logging }
