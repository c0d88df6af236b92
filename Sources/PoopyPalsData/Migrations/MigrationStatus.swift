import Foundation

/// Every migration the files or the history know of, with its state.
public struct MigrationStatus: Sendable {
    public enum State: String, Sendable {
        case applied, pending
        /// Applied, but the file changed since.
        case drifted
        /// Applied, but the file is gone.
        case missing
    }

    public struct Entry: Sendable {
        public let version: Int64
        public let name: String
        public let appliedAt: Date?
        public let state: State
    }

    public let entries: [Entry]

    init(files: [MigrationFile], applied: [Migrator.AppliedMigration]) {
        let records = Dictionary(uniqueKeysWithValues: applied.map { ($0.version, $0) })
        var entries = files.map { file -> Entry in
            guard let record = records[file.version] else {
                return Entry(version: file.version, name: file.name, appliedAt: nil, state: .pending)
            }
            return Entry(version: file.version, name: file.name, appliedAt: record.appliedAt,
                         state: record.checksum == file.checksum ? .applied : .drifted)
        }
        let known = Set(files.map(\.version))
        entries += applied.filter { !known.contains($0.version) }.map {
            Entry(version: $0.version, name: $0.name, appliedAt: $0.appliedAt, state: .missing)
        }
        self.entries = entries.sorted { $0.version < $1.version }
    }

    /// True when every file is applied unchanged and no applied file is missing.
    public var isUpToDate: Bool { entries.allSatisfy { $0.state == .applied } }

    /// The highest applied version.
    public var currentVersion: Int64? { entries.filter { $0.state != .pending }.map(\.version).max() }
}
