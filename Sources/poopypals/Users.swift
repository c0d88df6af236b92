import ArgumentParser
import Foundation
import PoopyPalsData
import PostgresClient

struct Users: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Repair and erase user data.",
        subcommands: [MergeDuplicates.self, Erase.self]
    )
}

extension Users {
    struct MergeDuplicates: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "merge-duplicates",
            abstract: "Merge users that share an email (after trimming and lower-casing) into the oldest one.",
            discussion: """
                For each such email the oldest user (then the smallest id) is kept; every reference to the others \
                (found from the catalog's foreign keys) is moved to it; the others are deleted; every email is \
                normalised. One transaction; running it again does nothing. Exit status: 0 done; 2 failed.
                """)

        @OptionGroup var connection: ConnectionOptions

        @Flag(help: "Do everything inside a transaction that is rolled back, and print it.")
        var dryRun = false

        @Flag(help: "Show emails in full (default: redacted).")
        var unredacted = false

        func run() throws {
            let connection = try connection.connect()
            let report: DuplicateUserMerger.Report
            do {
                report = try DuplicateUserMerger().run(on: connection, dryRun: dryRun)
            } catch {
                throw CommandFailure("merging duplicate users failed; nothing was changed: \(error)", status: .checkFailed)
            }
            let verb = dryRun ? "Would merge" : "Merged"
            for group in report.groups {
                let email = unredacted ? group.email : ((try? Email(group.email).redacted) ?? "***")
                print("\(email): keep \(group.canonical.uuidString.lowercased()), merge \(group.merged.count): "
                      + group.merged.map { $0.uuidString.lowercased() }.joined(separator: " "))
            }
            let moved = report.referencesMoved.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            print("\(verb) \(report.groups.count) group\(report.groups.count == 1 ? "" : "s"): \(report.usersMerged) users merged, "
                  + "\(report.totalReferencesMoved) references moved\(moved.isEmpty ? "" : " (\(moved))"), "
                  + "\(report.emailsNormalized) email\(report.emailsNormalized == 1 ? "" : "s") normalised.")
            if dryRun { print("Dry run: nothing was changed.") }
        }
    }
}

extension Users {
    struct Erase: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Erase a person's profile, every device linked to it and all their logs (an erasure request by email).",
            discussion: """
                One transaction. Prints counts, never the data. Exit status: 0 erased (or nothing to erase, \
                which is said); 1 no profile has this email; 2 failed, nothing was changed.
                """)

        @OptionGroup var connection: ConnectionOptions

        @Option(help: "The profile's email address (trimmed and lower-cased as the service stores it).")
        var email: String

        @Flag(help: "Count what would be erased; change nothing.")
        var dryRun = false

        func validate() throws {
            do { _ = try Email(email) } catch { throw ValidationError("--email: \(error.reason)") }
        }

        func run() throws {
            let connection = try connection.connect()
            let report: UserErasure.Report
            do {
                report = try UserErasure().run(on: connection, email: email, dryRun: dryRun)
            } catch {
                throw CommandFailure("erasing failed; nothing was changed: \(error)", status: .checkFailed)
            }
            let redacted = (try? Email(email).redacted) ?? "***"
            guard report.users > 0 else {
                print("No profile has the email \(redacted): nothing to erase.")
                throw CommandFailure(status: .problem)
            }
            print("\(dryRun ? "Would erase" : "Erased") the profile of \(redacted): 1 profile, \(report.devices) device\(report.devices == 1 ? "" : "s"), "
                  + "\(report.logs) log\(report.logs == 1 ? "" : "s").")
            if dryRun { print("Dry run: nothing was changed.") }
        }
    }
}
