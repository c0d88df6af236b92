/// Why migrating did not happen or stopped. Messages name files and versions, never data.
public enum MigrationError: Error, Sendable, CustomStringConvertible {
    case directoryNotFound(String)
    case unreadableFile(String)
    case invalidFileName(String)
    case duplicateVersion(Int64, [String])
    /// Checks made before anything ran found problems; nothing was applied.
    case refused([MigrationProblem])
    /// Another runner held the migration lock for the whole wait.
    case lockTimeout(holderPID: Int32?, waitedSeconds: Double)
    /// A statement failed. `location` is `file:line[:column]`; for a transactional file nothing of it remains.
    case statementFailed(file: String, statement: Int, location: String, runsInTransaction: Bool, underlying: any Error)
    /// A transactional file contains BEGIN/COMMIT/ROLLBACK, which would break its atomicity.
    case transactionControl(file: String, line: Int)
    /// A pre-flight check found the database not ready for a file; nothing was applied.
    case preflightFailed(file: String, check: String, message: String)
    /// A file names a pre-flight check that does not exist.
    case unknownPreflight(file: String, check: String)

    public var description: String {
        switch self {
        case .directoryNotFound(let path):
            return "migrations directory '\(path)' not found; run from the project root or pass --migrations-dir"
        case .unreadableFile(let name):
            return "cannot read migration file \(name) as UTF-8"
        case .invalidFileName(let name):
            return "migration file name '\(name)' does not match NNNN_snake_name.sql"
        case .duplicateVersion(let version, let files):
            return "version \(version) is used by more than one file: \(files.joined(separator: ", "))"
        case .refused(let problems):
            return "refusing to migrate; nothing was applied:\n" + problems.map { "  - \($0)" }.joined(separator: "\n")
        case .lockTimeout(let pid, let waited):
            let holder = pid.map { "process \($0)" } ?? "another session"
            return "another migration is running (the lock is held by \(holder)); gave up after \(Int(waited)) s"
        case .statementFailed(let file, let statement, let location, let transactional, let underlying):
            let remains = transactional
                ? "the file was rolled back; nothing of it was applied"
                : "the file runs without a transaction: statements before this one were applied"
            return "migration \(file) failed at statement \(statement) (\(location)): \(underlying)\n  \(remains)"
        case .preflightFailed(let file, let check, let message):
            return "refusing to migrate; nothing was applied. Pre-flight check '\(check)' for \(file) failed: \(message)"
        case .unknownPreflight(let file, let check):
            return "\(file) names an unknown pre-flight check '\(check)'"
        case .transactionControl(let file, let line):
            return "\(file):\(line) controls the transaction itself; the migrator wraps each file in one. "
                + "Remove it, or start the file with '\(MigrationFile.noTransactionHeader)'"
        }
    }
}

/// A reason to refuse migrating.
public enum MigrationProblem: Sendable, Equatable, CustomStringConvertible {
    /// An applied file was changed after it shipped.
    case drifted(version: Int64, fileName: String)
    /// The history says a version was applied, but no file has it.
    case missing(version: Int64, name: String)
    /// A pending file is numbered below the latest applied version.
    case outOfOrder(version: Int64, fileName: String, latestApplied: Int64)
    /// `--target` names no known version.
    case unknownTarget(Int64)

    public var description: String {
        switch self {
        case .drifted(let version, let fileName):
            return "\(fileName) (version \(version)) was changed after it was applied; shipped migrations must not be edited, add a new file instead"
        case .missing(let version, let name):
            return "version \(version) (\(name)) is recorded as applied but its file is missing"
        case .outOfOrder(let version, let fileName, let latest):
            return "\(fileName) (version \(version)) is numbered below the latest applied version \(latest); renumber it or pass --allow-out-of-order"
        case .unknownTarget(let version):
            return "target version \(version) matches no migration file"
        }
    }
}
