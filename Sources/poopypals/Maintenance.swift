import ArgumentParser
import Foundation
import PoopyPalsData
import PostgresClient

struct Maintenance: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Routine upkeep for a cron job: purge sync tombstones past their retention.",
        discussion: """
            Tombstones (deleted logs, kept so that phones learn of the delete) older than --tombstone-days \
            (default $POOPYPALS_TOMBSTONE_DAYS, else 90) are deleted; a phone whose cursor is older then gets \
            410 and pulls from the beginning. Exit status: 0 done; 2 failed (nothing was changed).
            """)

    @OptionGroup var connection: ConnectionOptions

    @Option(help: "Days to keep tombstones (1…3650).")
    var tombstoneDays: Int?

    func validate() throws {
        if let tombstoneDays, !TombstonePurge.allowedDays.contains(tombstoneDays) {
            throw ValidationError("--tombstone-days must be 1…3650")
        }
    }

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        guard let days = tombstoneDays ?? Int(environment["POOPYPALS_TOMBSTONE_DAYS"] ?? "\(TombstonePurge.defaultDays)"),
              TombstonePurge.allowedDays.contains(days) else {
            throw CommandFailure("POOPYPALS_TOMBSTONE_DAYS must be 1…3650", status: .checkFailed)
        }
        let connection = try connection.connect()
        let report: TombstonePurge.Report
        do {
            report = try TombstonePurge(days: days).run(on: connection)
        } catch {
            throw CommandFailure("maintenance failed; nothing was changed: \(error)", status: .checkFailed)
        }
        print("Purged \(report.tombstonesPurged) tombstone\(report.tombstonesPurged == 1 ? "" : "s") older than \(days) days "
              + "on \(report.devicesAffected) device\(report.devicesAffected == 1 ? "" : "s").")
    }
}
