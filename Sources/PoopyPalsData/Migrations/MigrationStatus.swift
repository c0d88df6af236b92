import Foundation
import Values

/// Every migration the files or the history know of, with its state.
public struct MigrationStatus: Sendable {
    public enum State: String, Sendable {
        case applied, pending
        /// Applied, but the file changed since.
        case drifted
        /// Applied, but the file is gone.
        case missing
        /// Applied by a later release's `migrate` (this release is older: a rollback): not this release's file.
        case newer
    }

    public struct Entry: Sendable {
        public let version: Int64
        public let name: String
        public let appliedAt: Date?
        public let state: State
        /// The file's phase; nil for a `missing` one (applied, its file not in this release).
        public let phase: MigrationFile.Phase?
    }

    public let entries: [Entry]

    init(files: [MigrationFile], applied: [Migrator.AppliedMigration], release: SemanticVersion = Release.version) {
        let records = Dictionary(uniqueKeysWithValues: applied.map { ($0.version, $0) })
        var entries = files.map { file -> Entry in
            guard let record = records[file.version] else {
                return Entry(version: file.version, name: file.name, appliedAt: nil, state: .pending, phase: file.phase)
            }
            return Entry(version: file.version, name: file.name, appliedAt: record.appliedAt,
                         state: record.checksum == file.checksum ? .applied : .drifted, phase: file.phase)
        }
        let known = Set(files.map(\.version))
        entries += applied.filter { !known.contains($0.version) }.map {
            let newer = $0.release.map { $0 > release } ?? false
            return Entry(version: $0.version, name: $0.name, appliedAt: $0.appliedAt, state: newer ? .newer : .missing, phase: nil)
        }
        self.entries = entries.sorted { $0.version < $1.version }
    }

    /// True when every file is applied unchanged and no applied file is missing (a later release's files aside).
    public var isUpToDate: Bool { entries.allSatisfy { $0.state == .applied || $0.state == .newer } }

    /// True when everything but post-deployment files is applied unchanged: what instances of this release need.
    public var preDeploymentDone: Bool {
        entries.allSatisfy { $0.state == .applied || $0.state == .newer || ($0.state == .pending && $0.phase == .postDeployment) }
    }

    /// The post-deployment files not applied yet.
    public var pendingPostDeployment: [Entry] { entries.filter { $0.state == .pending && $0.phase == .postDeployment } }

    /// The highest applied version.
    public var currentVersion: Int64? { entries.filter { $0.state != .pending }.map(\.version).max() }
}
