import ArgumentParser
import Foundation
import PoopyPalsData
import PostgresClient

struct Maintenance: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Routine upkeep for a cron job: purge sync tombstones past their retention, finish device erasures, forget full registration buckets.",
        discussion: """
            Tombstones (deleted logs, kept so that phones learn of the delete) older than --tombstone-days \
            (default $POOPYPALS_TOMBSTONE_DAYS, else 90) are deleted; a phone whose cursor is older then gets \
            410 and pulls from the beginning. Then device erasures under way (DELETE /v1/device of a large \
            device; the service finishes them too) are finished, 5 000 logs per transaction, for at most 30 \
            minutes. Then the registration limit's buckets that have refilled (under POOPYPALS_REGISTRATION_BURST \
            and the other limits serve reads) are deleted. Exit status: 0 done; 2 failed (the purge changed nothing; finished batches of erasures stay done).
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
        var erased = PendingErasures.Progress(devicesErasing: 0, logsErased: 0, batches: 0)
        let deadline = ContinuousClock.now + .seconds(30 * 60)
        do {
            repeat {
                let step = try PendingErasures.step(on: connection)
                erased.devicesErasing = step.devicesErasing
                erased.logsErased += step.logsErased
                erased.batches += 1
            } while erased.devicesErasing > 0 && erased.batches < 100_000 && ContinuousClock.now < deadline
        } catch {
            throw CommandFailure("finishing device erasures failed after \(erased.logsErased) logs: \(error)", status: .checkFailed)
        }
        print("Erasures: \(erased.logsErased) log\(erased.logsErased == 1 ? "" : "s") deleted; "
              + "\(erased.devicesErasing) device\(erased.devicesErasing == 1 ? "" : "s") still being erased.")
        // Registration buckets refilled to their burst, under the limits this environment gives `serve`.
        let rates: RateLimits
        do { rates = try RateLimits.fromEnvironment(environment) } catch {
            throw CommandFailure("\(error)", status: .checkFailed)
        }
        let forgotten: Int64
        do {
            forgotten = try RegistrationBuckets.forgetFull(on: connection, rates: rates)
        } catch {
            throw CommandFailure("forgetting full registration buckets failed: \(error)", status: .checkFailed)
        }
        print("Registration buckets: \(forgotten) full one\(forgotten == 1 ? "" : "s") forgotten.")
    }
}
