import Foundation
import Logging
import PostgresClient
import Values

/// Applies `sql/NNNN_name.sql` files in order, each with its history row in one transaction (or statement by
/// statement for files headed `-- poopypals:no-transaction`), under a session advisory lock so that concurrent
/// runners apply each file exactly once.
///
/// Runs on the connection it is given, blocking: call it from a thread of its own (the CLI's main thread, or
/// inside `ConnectionPool.withConnection`).
public struct Migrator: Sendable {
    public struct Options: Sendable {
        /// `lock_timeout` for each migration, so a DDL statement never queues behind a long transaction for long:
        /// while it waits, every request that touches the same table waits behind it, so this stays well under the
        /// requests' own lock timeout (`POOPYPALS_LOCK_TIMEOUT`, 2 s), and a busy table is tried again later
        /// (`lockRetries`) rather than waited for (issue 55: migrations under traffic).
        public var lockTimeout: Duration = .milliseconds(500)
        /// Further attempts after a lock timeout, with exponential backoff (capped at `maxLockRetryBackoff`).
        public var lockRetries = 10
        public var lockRetryBackoff: Duration = .milliseconds(250)
        public static let maxLockRetryBackoff: Duration = .seconds(4)
        /// Also apply the post-deployment migrations (`sql/post/`), after any pending pre-deployment one: only once
        /// no instance of the previous release serves (README "Upgrading").
        public var postDeployment = false
        /// The release running this: recorded with each file it applies, so that a later release's files are told
        /// from a file deleted from this one (`MigrationStatus.State.newer`).
        public var release = Release.version
        /// How long to wait for another runner's migration lock.
        public var advisoryLockWait: Duration = .seconds(60)
        public var allowOutOfOrder = false
        /// Apply up to and including this version.
        public var target: Int64?
        /// Before the first change, mark the WAL with a named restore point (`pg_create_restore_point`), so that
        /// point-in-time recovery can return to just before this run (`scripts/cluster.sh restore --to-name`).
        public var createRestorePoint = false

        public init() {}
    }

    /// A row of `schema_migrations`.
    public struct AppliedMigration: Sendable {
        public let version: Int64
        public let name: String
        public let checksum: String
        public let appliedAt: Date
        /// The release whose `migrate` applied it (nil before 1.1.0).
        public let release: SemanticVersion?
    }

    /// A file this run applied.
    public struct Applied: Sendable {
        public let file: MigrationFile
        public let duration: Duration
        public let attempts: Int
        /// Things done on the way that an operator should hear about.
        public let notes: [String]
    }

    /// What became of the restore point asked for by `Options.createRestorePoint`.
    public enum RestorePoint: Sendable, Equatable {
        /// Made: its name and where in the WAL it is.
        case created(name: String, lsn: String)
        /// Not made (the role may not, the WAL level is `minimal`, a standby): why, from the server.
        case notCreated(reason: String)
    }

    /// One run: what was applied, and the restore point made before it (nil when nothing was pending or none was
    /// asked for).
    public struct Run: Sendable {
        public let applied: [Applied]
        public let restorePoint: RestorePoint?
    }

    /// Pre-flight checks a file can ask for: each returns why the database is not ready, or nil.
    static let preflightChecks: [String: @Sendable (Connection) throws -> String?] = [
        "duplicate-emails": { connection in
            let groups = try DuplicateEmails.findIfUsersExist(on: connection)
            guard !groups.isEmpty else { return nil }
            let users = groups.reduce(0) { $0 + $1.users }
            return "\(groups.count) email\(groups.count == 1 ? " is" : "s are") shared by \(users) users "
                + "(exactly, or differing only in letter case, spaces or Unicode form). Merge them first with "
                + "`poopypals users merge-duplicates` (preview with --dry-run), then run migrate again."
        },
        "canonical-emails": { connection in
            guard try connection.query("SELECT to_regclass('users') IS NOT NULL")[0].decode(0, as: Bool.self) else { return nil }
            let count = try DuplicateEmails.nonCanonicalCount(on: connection)
            guard count > 0 else { return nil }
            return "\(count) stored email\(count == 1 ? " is" : "s are") not in the canonical form (Unicode NFKC, case "
                + "folding, IDNA domain, no invisible characters); the new check would then refuse any later update of "
                + "\(count == 1 ? "that user" : "those users"). Rewrite them with `poopypals users merge-duplicates` "
                + "(preview with --dry-run), then run migrate again."
        },
    ]

    /// Distinguishes our session advisory lock from any other application's ("PoopyPls" in ASCII).
    static let advisoryLockKey: Int64 = 0x506F_6F70_7950_6C73

    /// The last migration written for one PostgreSQL only (issue 45). On a Citus coordinator these run with Citus's
    /// DDL propagation off, as local tables and functions of the coordinator: propagated, their statements run on
    /// the workers as the role they switched to, and ours are NOLOGIN roles (`role … is not permitted to log in`,
    /// sql/0010), and a schema grant to them is not carried (0013's function replaced on a worker without CREATE
    /// on `public`). Later migrations are written for both, and run with Citus's defaults: a statement on a table
    /// already distributed must reach its shards. 0027 to 0030 (the key map written by registration, rotation
    /// and erasure; policies a shard can run; statements Citus runs; the kept id's check) still make coordinator
    /// objects only, before anything is distributed: 0027–0029's functions belong to the NOLOGIN profile role too,
    /// and 0030's function, propagated, carried the service roles to the workers with the schema's grants (a
    /// function with no table, run on the coordinator).
    static let lastSingleNodeVersion: Int64 = 30

    static let historyTableSQL = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version bigint PRIMARY KEY,
            name text NOT NULL,
            checksum text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now(),
            execution_ms double precision NOT NULL,
            applied_by text NOT NULL DEFAULT current_user
        )
        """

    /// Since 1.1.0: which release applied each file. Added beside what 1.0.0 reads and writes (it names its columns).
    static let releaseColumnSQL = "ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS release text"

    public let files: [MigrationFile]
    public let options: Options
    private let logger: Logger

    public init(files: [MigrationFile], options: Options = Options(), logger: Logger = Logger(label: "poopypals.migrate")) {
        self.files = files
        self.options = options
        self.logger = logger
    }

    /// The files that `migrate` would apply, after every check it makes. Changes nothing (the history table
    /// is not even created).
    /// - Throws: `MigrationError.refused` listing drifted, missing and out-of-order files.
    public func plan(on connection: Connection) throws -> [MigrationFile] {
        try pendingFiles(applied: appliedMigrations(on: connection))
    }

    /// Every known version and its state. Changes nothing.
    public func status(on connection: Connection) throws -> MigrationStatus {
        MigrationStatus(files: files, applied: try appliedMigrations(on: connection), release: options.release)
    }

    /// Applies what is pending.
    /// - Throws: `MigrationError` (refused before anything ran, lock timeout, or a failing statement),
    ///   or a `PostgresError` / `PostgresClientError` from the server or connection.
    @discardableResult
    public func migrate(on connection: Connection) throws -> [Applied] {
        try run(on: connection).applied
    }

    /// Applies what is pending, first making the restore point when `Options.createRestorePoint` asks for one.
    public func run(on connection: Connection) throws -> Run {
        try acquireLock(on: connection)
        defer { _ = try? connection.query("SELECT pg_advisory_unlock(\(Self.advisoryLockKey))") }
        // Everything that can refuse runs before the first change (even before the history table exists).
        let applied = try appliedMigrations(on: connection)
        let pending = try pendingFiles(applied: applied)
        let scripts = try pending.map { file in
            let script = SQLScript(file.sql)
            if file.runsInTransaction, let control = script.statements.first(where: Self.controlsTransaction) {
                throw MigrationError.transactionControl(file: file.fileName, line: control.line)
            }
            return script
        }
        try runPreflights(for: pending, on: connection)
        try connection.executeScript(Self.historyTableSQL)
        if try !Self.hasReleaseColumn(on: connection) { try connection.executeScript(Self.releaseColumnSQL) }
        if pending.isEmpty { logger.info("database is up to date") }
        let restorePoint = pending.isEmpty || !options.createRestorePoint
            ? nil : try makeRestorePoint(from: applied.last?.version, on: connection)
        let citus = try !pending.isEmpty && connection.installedExtensions().contains("citus")
        let done = try zip(pending, scripts).map { file, script in
            try apply(file, script: script, local: citus && file.version <= Self.lastSingleNodeVersion, on: connection)
        }
        return Run(applied: done, restorePoint: restorePoint)
    }

    /// `poopypals-migrate-from-<version>-<UTC time>` (at most 63 bytes, as restore point names must be). A server
    /// refusal is the answer, not a failure: the migration goes on without one, and the caller says why.
    private func makeRestorePoint(from version: Int64?, on connection: Connection) throws -> RestorePoint {
        let name = Self.restorePointName(from: version, at: Date())
        do {
            let lsn = try connection.query("SELECT pg_catalog.pg_create_restore_point(\(name))::text")[0].decode(0, as: String.self)
            logger.info("restore point made before migrating", metadata: ["name": "\(name)", "lsn": "\(lsn)"])
            return .created(name: name, lsn: lsn)
        } catch let error as PostgresError {
            logger.warning("no restore point before migrating", metadata: ["sqlstate": "\(error.sqlState)", "reason": "\(error.message)"])
            return .notCreated(reason: "\(error.message) (SQLSTATE \(error.sqlState))")
        }
    }

    static func restorePointName(from version: Int64?, at date: Date) -> String {
        let stamp = Date.ISO8601FormatStyle(timeZone: .gmt).year().month().day().time(includingFractionalSeconds: false)
            .timeSeparator(.omitted).dateSeparator(.omitted).format(date)
        // The style names no zone without a time zone field: the Z is ours (the time is UTC).
        return "poopypals-migrate-from-\(version.map(String.init) ?? "0")-\(stamp)Z"
    }

    // MARK: - Planning

    private func appliedMigrations(on connection: Connection) throws -> [AppliedMigration] {
        let exists = try connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL")[0].decode(0, as: Bool.self)
        guard exists else { return [] }
        let rows = try Self.hasReleaseColumn(on: connection)
            ? connection.query("SELECT version, name, checksum, applied_at, release FROM schema_migrations ORDER BY version")
            : connection.query("SELECT version, name, checksum, applied_at, NULL::text AS release FROM schema_migrations ORDER BY version")
        return try rows.map {
            AppliedMigration(version: try $0.decode("version"), name: try $0.decode("name"),
                             checksum: try $0.decode("checksum"), appliedAt: try $0.decode("applied_at"),
                             release: try $0.decode("release", as: String?.self).flatMap { SemanticVersion($0) })
        }
    }

    private static func hasReleaseColumn(on connection: Connection) throws -> Bool {
        try connection.query("""
            SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('schema_migrations') AND attname = 'release'
                           AND NOT attisdropped) AS has
            """)[0].decode("has", as: Bool.self)
    }

    private func pendingFiles(applied: [AppliedMigration]) throws -> [MigrationFile] {
        let byVersion = Dictionary(uniqueKeysWithValues: files.map { ($0.version, $0) })
        let appliedVersions = Set(applied.map(\.version))
        var problems: [MigrationProblem] = []
        for record in applied {
            guard let file = byVersion[record.version] else {
                // Applied by a later release (a rollback's instances run this one): not this release's to judge.
                if let release = record.release, release > options.release { continue }
                problems.append(.missing(version: record.version, name: record.name))
                continue
            }
            if file.checksum != record.checksum { problems.append(.drifted(version: file.version, fileName: file.fileName)) }
        }
        var pending = files.filter { !appliedVersions.contains($0.version) && (options.postDeployment || $0.phase == .preDeployment) }
        if let target = options.target {
            if byVersion[target] == nil { problems.append(.unknownTarget(target)) }
            pending = pending.filter { $0.version <= target }
        }
        if !options.allowOutOfOrder {
            // A post-deployment file may wait for its step while the next release's pre-deployment files (numbered
            // after it) are applied: it is in order among post-deployment files. A pre-deployment file is in order
            // among every applied file of this release's.
            for file in pending {
                let latest = applied.filter { file.phase == .preDeployment ? byVersion[$0.version] != nil : byVersion[$0.version]?.phase == file.phase }
                    .map(\.version).max() ?? 0
                if file.version < latest {
                    problems.append(.outOfOrder(version: file.version, fileName: file.fileName, latestApplied: latest))
                }
            }
        }
        // In version order: the order a database upgraded release by release, each post-deployment step on time, met
        // them in (a fresh database gets the same schema).
        pending.sort { $0.version < $1.version }
        guard problems.isEmpty else { throw MigrationError.refused(problems) }
        return pending
    }

    private func runPreflights(for files: [MigrationFile], on connection: Connection) throws {
        for file in files {
            for name in file.preflights {
                guard let check = Self.preflightChecks[name] else { throw MigrationError.unknownPreflight(file: file.fileName, check: name) }
                if let message = try check(connection) {
                    throw MigrationError.preflightFailed(file: file.fileName, check: name, message: message)
                }
            }
        }
    }

    private static func controlsTransaction(_ statement: SQLScript.Statement) -> Bool {
        let words = statement.text.uppercased().split(whereSeparator: { $0.isWhitespace || $0 == ";" })
        switch statement.keyword {
        case "COMMIT", "ROLLBACK", "END", "ABORT", "START": return true
        case "BEGIN": return !words.contains("ATOMIC")
        default: return false
        }
    }

    // MARK: - Locking

    /// Polls `pg_try_advisory_lock` rather than blocking in `pg_advisory_lock`: a session waiting inside a
    /// statement holds a snapshot, and a concurrent `CREATE INDEX CONCURRENTLY` would wait for it forever.
    private func acquireLock(on connection: Connection) throws {
        let clock = ContinuousClock()
        let started = clock.now
        var announced = false
        while true {
            if try connection.query("SELECT pg_try_advisory_lock(\(Self.advisoryLockKey))")[0].decode(0, as: Bool.self) { return }
            let waited = clock.now - started
            if waited >= options.advisoryLockWait {
                throw MigrationError.lockTimeout(holderPID: try lockHolder(on: connection), waitedSeconds: waited.seconds)
            }
            if !announced {
                logger.info("waiting for another migration run to finish")
                announced = true
            }
            Thread.sleep(forTimeInterval: 0.05 + Double.random(in: 0..<0.1))
        }
    }

    private func lockHolder(on connection: Connection) throws -> Int32? {
        let key = UInt64(bitPattern: Self.advisoryLockKey)
        let rows = try connection.query("""
            SELECT pid FROM pg_locks
            WHERE locktype = 'advisory' AND granted AND objsubid = 1
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND classid = \(Int64(key >> 32))::bigint::oid AND objid = \(Int64(key & 0xFFFF_FFFF))::bigint::oid
            """)
        return try rows.first?.decode("pid", as: Int32.self)
    }

    // MARK: - Applying

    /// `local`: with Citus's DDL propagation off (`lastSingleNodeVersion`).
    private func apply(_ file: MigrationFile, script: SQLScript, local: Bool, on connection: Connection) throws -> Applied {
        let clock = ContinuousClock()
        let started = clock.now
        var attempt = 1
        var notes: [String] = []
        if !file.runsInTransaction { notes += try dropInvalidIndexes(script, of: file, on: connection) }
        while true {
            do {
                if file.runsInTransaction {
                    try connection.transaction { connection in
                        try connection.query("SELECT set_config('lock_timeout', \(Self.milliseconds(options.lockTimeout)), true)")
                        if local { try connection.query("SELECT set_config('citus.enable_ddl_propagation', 'off', true)") }
                        try run(script, of: file, on: connection)
                        try record(file, duration: clock.now - started, on: connection)
                    }
                } else {
                    try connection.query("SELECT set_config('lock_timeout', \(Self.milliseconds(options.lockTimeout)), false)")
                    if local { try connection.query("SELECT set_config('citus.enable_ddl_propagation', 'off', false)") }
                    defer { _ = try? connection.executeScript(local ? "RESET lock_timeout; RESET citus.enable_ddl_propagation" : "RESET lock_timeout") }
                    try run(script, of: file, on: connection)
                    try record(file, duration: clock.now - started, on: connection)
                }
                let duration = clock.now - started
                logger.info("applied \(file.fileName)", metadata: ["ms": "\(duration.milliseconds)", "attempts": "\(attempt)"])
                return Applied(file: file, duration: duration, attempts: attempt, notes: notes)
            } catch where (SQLState.lockNotAvailable ~= Self.serverError(in: error) || SQLState.deadlockDetected ~= Self.serverError(in: error))
                        && attempt <= options.lockRetries {
                // A deadlock too: roles are the server's, and two databases migrating at once (sql/0022) can each
                // hold what the other's role statements need; the file rolls back whole and runs again.
                let backoff = min(options.lockRetryBackoff * (1 << min(attempt - 1, 20)), Options.maxLockRetryBackoff)
                logger.warning("\(file.fileName) timed out waiting for a lock; retrying",
                               metadata: ["attempt": "\(attempt)", "backoff_ms": "\(backoff.milliseconds)"])
                Thread.sleep(forTimeInterval: backoff.seconds * Double.random(in: 0.8...1.2))
                attempt += 1
            }
        }
    }

    /// A `CREATE INDEX CONCURRENTLY` that failed midway leaves an INVALID index behind, which `IF NOT EXISTS`
    /// would then silently keep. Before running the file again, drop each invalid index it is about to build.
    private func dropInvalidIndexes(_ script: SQLScript, of file: MigrationFile, on connection: Connection) throws -> [String] {
        var notes: [String] = []
        for statement in script.statements {
            guard let name = Self.concurrentIndexName(statement.code) else { continue }
            // The server's own spelling of the index (`regclass::text`: quoted and qualified as needed), not the
            // migration's token, is what goes into the DROP (which, CONCURRENTLY, cannot be prepared or bound).
            let found = try connection.query("""
                SELECT i.indexrelid::regclass::text AS name FROM pg_index i WHERE i.indexrelid = to_regclass(\(name)) AND NOT i.indisvalid
                """).first
            guard let found else { continue }
            let quotedName: String = try found.decode("name")
            let note = "dropped invalid index \(name) left by an earlier failed build of \(file.fileName); building it again"
            logger.warning("\(note)")
            try connection.executeScript("DROP INDEX CONCURRENTLY IF EXISTS " + quotedName)
            notes.append(note)
        }
        return notes
    }

    /// Whole milliseconds as `lock_timeout` takes them (bound, never spliced).
    static func milliseconds(_ duration: Duration) -> String { String(duration.milliseconds) }

    /// The index name of `CREATE [UNIQUE] INDEX CONCURRENTLY [IF NOT EXISTS] name …`, else nil.
    static func concurrentIndexName(_ code: String) -> String? {
        var words = code.split(whereSeparator: \.isWhitespace).map(String.init)[...]
        func take(_ word: String) -> Bool {
            guard words.first?.uppercased() == word else { return false }
            words = words.dropFirst()
            return true
        }
        guard take("CREATE") else { return nil }
        _ = take("UNIQUE")
        guard take("INDEX"), take("CONCURRENTLY") else { return nil }
        if take("IF") { guard take("NOT"), take("EXISTS") else { return nil } }
        guard let name = words.first, !name.uppercased().hasPrefix("ON") else { return nil }
        return name.hasSuffix("(") ? String(name.dropLast()) : name
    }

    private func run(_ script: SQLScript, of file: MigrationFile, on connection: Connection) throws {
        for (index, statement) in script.statements.enumerated() {
            do {
                try connection.executeScript(statement.text)
            } catch {
                var location = "\(file.fileName):\(statement.line)"
                if let position = PostgresError.find(in: error)?.position {
                    let (line, column) = script.location(ofOffset: statement.offset + position - 1)
                    location = "\(file.fileName):\(line):\(column)"
                }
                throw MigrationError.statementFailed(file: file.fileName, statement: index + 1, location: location,
                                                     runsInTransaction: file.runsInTransaction, underlying: error)
            }
        }
    }

    private func record(_ file: MigrationFile, duration: Duration, on connection: Connection) throws {
        try connection.execute("""
            INSERT INTO schema_migrations (version, name, checksum, execution_ms, release)
            VALUES (\(file.version), \(file.name), \(file.checksum), \(duration.seconds * 1000), \(options.release.description))
            """)
    }

    /// The server error behind a migration failure, so retries match on SQLSTATE.
    static func serverError(in error: any Error) -> any Error {
        if case .statementFailed(_, _, _, _, let underlying) = error as? MigrationError { return underlying }
        return error
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
    var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}
