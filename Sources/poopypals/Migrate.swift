import ArgumentParser
import Foundation
import PoopyPalsData
import PostgresClient

struct Migrate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply the SQL migrations in sql/, or show their status.",
        subcommands: [Up.self, Status.self],
        defaultSubcommand: Up.self
    )
}

struct MigrationSourceOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Folder of NNNN_name.sql files (default: $POOPYPALS_MIGRATIONS_DIR, else ./sql).", valueName: "dir"))
    var migrationsDir: String?

    func load() throws -> [MigrationFile] {
        let path = migrationsDir ?? ProcessInfo.processInfo.environment["POOPYPALS_MIGRATIONS_DIR"] ?? "sql"
        do {
            return try MigrationFile.load(directory: URL(fileURLWithPath: path))
        } catch {
            throw CommandFailure("\(error)", status: .checkFailed)
        }
    }
}

extension Migrate {
    struct Up: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply pending migrations (the default): the pre-deployment ones, or with --post-deployment all.",
            discussion: """
                A rolling upgrade (README "Upgrading"): `migrate` before replacing any instance (the previous release \
                keeps working on what it applies), then the instances, then `migrate --post-deployment` once no \
                instance of the previous release is left. Exit status: 0 applied or up to date; 1 refused or failed; \
                2 database unreachable or bad configuration.
                """
        )

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var source: MigrationSourceOptions

        @Flag(help: "Print the plan and the SQL; change nothing.")
        var dryRun = false

        @Flag(help: "Also apply the post-deployment migrations (sql/post/): only once no instance of the previous release serves.")
        var postDeployment = false

        @Option(help: "Apply up to and including this version.")
        var target: Int64?

        @Flag(help: "Apply files numbered below the latest applied version.")
        var allowOutOfOrder = false

        @Option(help: ArgumentHelp("lock_timeout for each migration (e.g. 500ms, 2s): requests on the same table wait behind it this long at most.",
                                   valueName: "duration"))
        var lockTimeout = DurationArgument(argument: "500ms")!

        @Option(help: "Further attempts after a lock timeout, with backoff (250 ms doubling, at most 4 s).")
        var lockRetries = 10

        @Option(help: ArgumentHelp("How long to wait for another migration run (e.g. 60s).", valueName: "duration"))
        var lockWait = DurationArgument(argument: "60s")!

        @Option(help: ArgumentHelp("Retry the first connection this long while the database is unreachable (e.g. 60s; 0 fails at once).",
                                   valueName: "duration"))
        var waitForDatabase = DurationArgument(argument: "0s")!

        func validate() throws {
            if let target, target <= 0 { throw ValidationError("--target must be a positive version number") }
            if lockRetries < 0 || lockRetries > 20 { throw ValidationError("--lock-retries must be between 0 and 20") }
        }

        func run() throws {
            let files = try source.load()
            var options = Migrator.Options()
            options.target = target
            options.allowOutOfOrder = allowOutOfOrder
            options.lockTimeout = lockTimeout.duration
            options.lockRetries = lockRetries
            options.advisoryLockWait = lockWait.duration
            options.createRestorePoint = !dryRun
            options.postDeployment = postDeployment
            let migrator = Migrator(files: files, options: options)
            let connection = try connection.connect(waitingUpTo: waitForDatabase.duration)
            do {
                if dryRun {
                    print(try DryRun.render(plan: migrator.plan(on: connection), status: migrator.status(on: connection)))
                    return
                }
                let run = try migrator.run(on: connection)
                let applied = run.applied
                switch run.restorePoint {
                case .created(let name, let lsn)?:
                    print("restore point: \(name) (WAL \(lsn)); to undo this run: scripts/cluster.sh restore --to-name \(name)")
                case .notCreated(let reason)?:
                    print("note: no restore point was made before migrating (\(reason)); a point-in-time restore can "
                          + "still return to a time before this run. To allow one: GRANT EXECUTE ON FUNCTION "
                          + "pg_create_restore_point(text) TO the migrating role, with wal_level replica or logical.")
                case nil:
                    break
                }
                for note in applied.flatMap(\.notes) { print("note: \(note)") }
                let status = try migrator.status(on: connection)
                let version = status.currentVersion.map { String($0) } ?? "none"
                print(applied.isEmpty
                      ? "Nothing to apply; the database is at version \(version)."
                      : "Applied \(applied.count) migration\(applied.count == 1 ? "" : "s"); the database is at version \(version).")
                let later = status.entries.filter { $0.state == .newer }
                if !later.isEmpty {
                    print("note: the database also has \(later.count) migration\(later.count == 1 ? "" : "s") of a later release ("
                          + later.map { String(format: "%04lld", $0.version) }.joined(separator: ", ")
                          + "), left as they are: this release serves it while its oldest supported release allows (README \"Upgrading\").")
                }
                let waiting = status.pendingPostDeployment
                if !waiting.isEmpty {
                    print("\(waiting.count) post-deployment migration\(waiting.count == 1 ? " waits" : "s wait") ("
                          + waiting.map { String(format: "%04lld", $0.version) }.joined(separator: ", ")
                          + "): once no instance of the previous release serves, run `poopypals migrate --post-deployment`.")
                }
            } catch {
                throw CommandFailure("\(error)", status: connection.isOpen ? .problem : .checkFailed)
            }
        }
    }

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show each migration and whether it is applied.",
            discussion: "Exit status: 0 up to date; 1 anything pending, drifted or missing; 2 the check failed."
        )

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var source: MigrationSourceOptions

        @Flag(help: "Print JSON instead of a table.")
        var json = false

        func run() throws {
            let migrator = Migrator(files: try source.load())
            let connection = try connection.connect()
            let status: MigrationStatus
            do {
                status = try migrator.status(on: connection)
                print(json ? try StatusOutput.json(status) : StatusOutput.table(status))
            } catch {
                throw CommandFailure("\(error)", status: .checkFailed)
            }
            if !status.isUpToDate { throw CommandFailure(status: .problem) }
        }
    }
}

/// What `migrate --dry-run` prints.
enum DryRun {
    static func render(plan: [MigrationFile], status: MigrationStatus) -> String {
        let version = status.currentVersion.map { String($0) } ?? "none"
        guard !plan.isEmpty else { return "Nothing to apply; the database is at version \(version).\nDry run: nothing was changed." }
        var text = "Would apply \(plan.count) migration\(plan.count == 1 ? "" : "s") (the database is at version \(version)):\n"
        for file in plan {
            let folder = file.phase == .postDeployment ? "\(MigrationFile.postDeploymentFolder)/" : ""
            text += "\n-- >>> \(folder)\(file.fileName) (\(file.phase.rawValue), "
                + "\(file.runsInTransaction ? "in one transaction" : "no transaction, statement by statement"))\n"
            text += file.sql.hasSuffix("\n") ? file.sql : file.sql + "\n"
        }
        return text + "\nDry run: nothing was changed."
    }
}

/// What `migrate status` prints.
enum StatusOutput {
    static func table(_ status: MigrationStatus) -> String {
        OutputFormat.table(["VERSION", "NAME", "APPLIED AT (UTC)", "STATE", "PHASE"], status.entries.map {
            [String(format: "%04lld", $0.version), $0.name, $0.appliedAt.map(OutputFormat.timestamp) ?? "-", $0.state.rawValue,
             $0.phase?.rawValue ?? "-"]
        })
    }

    /// `{"upToDate":…, "currentVersion":…, "migrations":[{version, name, appliedAt, state}]}`.
    static func json(_ status: MigrationStatus) throws -> String {
        struct Entry: Encodable { let version: Int64; let name: String; let appliedAt: Date?; let state: String; let phase: String? }
        struct Document: Encodable {
            let upToDate: Bool; let preDeploymentDone: Bool; let currentVersion: Int64?; let migrations: [Entry]
        }
        return try OutputFormat.json(Document(
            upToDate: status.isUpToDate, preDeploymentDone: status.preDeploymentDone, currentVersion: status.currentVersion,
            migrations: status.entries.map {
                Entry(version: $0.version, name: $0.name, appliedAt: $0.appliedAt, state: $0.state.rawValue, phase: $0.phase?.rawValue)
            }))
    }
}
