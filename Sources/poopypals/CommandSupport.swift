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

    var configuration: ConnectionConfiguration { .resolve(databaseURL: databaseURL) }

    /// Connects, or exits with status 2 and libpq's reason (never the password).
    func connect() throws -> Connection {
        bootstrapLogging()
        do {
            return try Connection(configuration: configuration)
        } catch {
            fail("\(error)", status: .checkFailed)
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

    init?(argument: String) {
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60)]
        for (suffix, scale) in units where argument.hasSuffix(suffix) {
            guard let value = Double(argument.dropLast(suffix.count)), value >= 0 else { return nil }
            duration = .milliseconds(Int64(value * scale * 1000))
            return
        }
        guard let seconds = Double(argument), seconds >= 0 else { return nil }
        duration = .milliseconds(Int64(seconds * 1000))
    }
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
