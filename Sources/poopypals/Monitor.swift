import ArgumentParser
import Foundation
import PoopyPalsData
import PostgresClient

/// Checks a cron job can alert on. Exit status: 0 fine, 1 problem found, 2 the check itself failed.
struct Monitor: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Checks for cron jobs and Nagios-style monitoring.",
        discussion: "Exit status: 0 nothing found; 1 a problem was found; 2 the check itself failed (database unreachable, missing table).",
        subcommands: [DuplicateEmailsCheck.self, RLSCheck.self, ArchivingCheck.self]
    )
}

extension Monitor {
    struct DuplicateEmailsCheck: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "duplicate-emails",
            abstract: "Emails used by more than one user, exactly or after trimming and lower-casing; newest first. Also stored emails the current rule refuses.")

        @OptionGroup var connection: ConnectionOptions

        @Flag(help: "Print JSON instead of a table.")
        var json = false

        @Flag(help: "Show emails in full (default: redacted, c***@example.com, since cron output ends up in logs).")
        var unredacted = false

        @Flag(help: "Print the SQL that reads the rows (they are grouped by the canonical email form in Swift), and exit.")
        var showSQL = false

        func run() throws {
            if showSQL {
                print(DuplicateEmails.sql)
                return
            }
            let connection = try connection.connect()
            let groups: [DuplicateEmails.Group]
            let refused: [UUID]
            do {
                groups = try DuplicateEmails.find(on: connection)
                refused = try DuplicateEmails.refused(on: connection)
            } catch {
                throw CommandFailure("the duplicate-email check failed: \(error)", status: .checkFailed)
            }
            let shown = groups.map { unredacted ? $0.email : $0.redactedEmail }
            if json {
                struct Entry: Encodable { let email: String; let users: Int; let kind: String; let newestCreatedAt: Date?; let userIds: [UUID] }
                struct Document: Encodable { let duplicates: [Entry]; let groups: Int; let affectedUsers: Int; let refusedEmailUserIds: [UUID] }
                let entries = zip(groups, shown).map { Entry(email: $1, users: $0.users, kind: $0.kind, newestCreatedAt: $0.newestCreatedAt, userIds: $0.userIDs) }
                print(try OutputFormat.json(Document(duplicates: entries, groups: groups.count, affectedUsers: groups.reduce(0) { $0 + $1.users },
                                                     refusedEmailUserIds: refused)))
            } else if groups.isEmpty {
                print("No duplicate emails.")
            } else {
                let rows = zip(groups, shown).map { group, email in
                    [email, String(group.users), group.kind, group.newestCreatedAt.map(OutputFormat.timestamp) ?? "-",
                     group.userIDs.map { $0.uuidString.lowercased() }.joined(separator: " ")]
                }
                print(OutputFormat.table(["EMAIL", "USERS", "KIND", "NEWEST (UTC)", "USER IDS"], rows))
                print("\n\(groups.count) email\(groups.count == 1 ? "" : "s") shared by \(groups.reduce(0) { $0 + $1.users }) users. Repair: poopypals users merge-duplicates --dry-run")
            }
            if !json && !refused.isEmpty {
                // Ids only: the addresses are what the person must change, and cron output ends up in logs.
                print("\n\(refused.count) stored email\(refused.count == 1 ? " is" : "s are") refused by the current rule (no canonical "
                      + "form, so no merge can rewrite \(refused.count == 1 ? "it" : "them"); ask for another address, or erase on request). "
                      + "User ids, newest first: \(refused.map { $0.uuidString.lowercased() }.joined(separator: " "))")
            }
            if !groups.isEmpty || !refused.isEmpty { throw CommandFailure(status: .problem) }
        }
    }

    struct RLSCheck: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rls",
            abstract: "Is device isolation on: RLS enabled and forced, the four policies, the function, the service role.")

        @OptionGroup var connection: ConnectionOptions

        @Flag(help: "Print JSON instead of a list.")
        var json = false

        func run() throws {
            let connection = try connection.connect()
            let report: RLSAudit.Report
            do {
                report = try RLSAudit().run(on: connection)
            } catch {
                throw CommandFailure("the RLS audit failed: \(error)", status: .checkFailed)
            }
            if json {
                print(try OutputFormat.json(report))
            } else {
                for check in report.checks {
                    print("\(check.ok ? "ok  " : "FAIL") \(check.check)\(check.problem.map { ": \($0)" } ?? "")")
                }
                print(report.ok ? "\nDevice isolation is on." : "\n\(report.checks.filter { !$0.ok }.count) check(s) failed.")
            }
            if !report.ok { throw CommandFailure(status: .problem) }
        }
    }

    struct ArchivingCheck: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "archiving",
            abstract: "Is continuous archiving keeping up (pg_stat_archiver of the primary)?",
            discussion: "Exit status: 0 fine; 1 archiving off, failing, or finished WAL segments waiting longer than --max-lag; 2 could not check (unreachable, a standby).")

        @OptionGroup var connection: ConnectionOptions

        @Flag(help: "Print JSON instead of a list.")
        var json = false

        @Option(help: ArgumentHelp("How long finished WAL segments may wait for the archive (e.g. 60s, 5m).", valueName: "duration"))
        var maxLag = DurationArgument(argument: "60s")!

        func run() throws {
            let connection = try connection.connect()
            let status: ArchiveStatus
            do {
                status = try ArchiveStatus.read(on: connection)
            } catch {
                throw CommandFailure("the archiving check failed: \(error)", status: .checkFailed)
            }
            let problems = status.problems(maxLag: Double(maxLag.duration.components.seconds))
            if json {
                struct Document: Encodable { let ok: Bool; let problems: [String]; let status: ArchiveStatus }
                print(try OutputFormat.json(Document(ok: problems.isEmpty, problems: problems, status: status)))
            } else {
                let last = status.lastArchivedWAL.map { name in
                    "\(name), \(status.secondsSinceLastArchived.map { String(Int($0.rounded())) } ?? "?") s ago"
                } ?? "none yet"
                print("archive_mode \(status.archiveMode); archived \(status.archivedCount) (last: \(last)); failed \(status.failedCount); "
                      + "finished segments waiting: \(status.segmentsWaiting.map(String.init) ?? "unknown")")
                for problem in problems { print("FAIL \(problem)") }
                if problems.isEmpty { print("Archiving keeps up.") }
            }
            if !problems.isEmpty { throw CommandFailure(status: .problem) }
        }
    }
}
