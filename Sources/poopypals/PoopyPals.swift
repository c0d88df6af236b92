import ArgumentParser
import Foundation
import PoopyPalsData

@main
struct PoopyPals: AsyncParsableCommand {

    static let configuration = CommandConfiguration(
        commandName: "poopypals",
        abstract: "The PoopyPals data layer: the HTTP service, migrations and operations on its PostgreSQL database.",
        discussion: "Exit status, for every command: 0 fine; 1 the answer is no; 2 the command could not do its job (including a usage error).",
        version: Release.description,
        subcommands: [Migrate.self, Monitor.self, Users.self, Devices.self, Maintenance.self, Serve.self, DevToken.self]
    )

    /// ArgumentParser exits 64 (EX_USAGE) for a usage error; our convention is 0/1/2 for every command, so a
    /// cron job or script needs to know only three codes.
    static func main() async {
        // Log lines carry local time. With TZ unset, glibc checks /etc/localtime (a stat) for every line it
        // formats — every request's log line, measured in a profile of `serve`; naming the same file in TZ makes
        // it read once. A TZ the operator set is kept. First thing in the process, before any thread reads TZ.
        if getenv("TZ") == nil { setenv("TZ", ":/etc/localtime", 0) }
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let failure as CommandFailure {
            if let message = failure.message { FileHandle.standardError.write(Data("error: \(message)\n".utf8)) }
            Foundation.exit(failure.status.rawValue)
        } catch {
            if exitCode(for: error) == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(ExitStatus.checkFailed.rawValue)
            }
            exit(withError: error)
        }
    }
}
