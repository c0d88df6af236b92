import ArgumentParser
import Foundation
import PoopyPalsData
import PostgresClient

struct Users: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Repair user data.",
        subcommands: [MergeDuplicates.self]
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
                fail("merging duplicate users failed; nothing was changed: \(error)", status: .checkFailed)
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
