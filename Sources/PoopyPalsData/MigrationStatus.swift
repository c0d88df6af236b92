import Foundation

/// Every migration the files or the history know of, with its state.
public struct MigrationStatus: Sendable, Encodable {
    public enum State: String, Sendable, Encodable {
        case applied, pending
        /// Applied, but the file changed since.
        case drifted
        /// Applied, but the file is gone.
        case missing
    }

    public struct Entry: Sendable, Encodable {
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

    /// A fixed-width table for people.
    public func table() -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime, .withSpaceBetweenDateAndTime]
        let rows = [["VERSION", "NAME", "APPLIED AT (UTC)", "STATE"]] + entries.map {
            [String(format: "%04lld", $0.version), $0.name, $0.appliedAt.map(formatter.string(from:)) ?? "-", $0.state.rawValue]
        }
        let widths = (0..<4).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { column, value in
                column == 3 ? value : value.padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }

    /// JSON for machines: `{"upToDate":…, "currentVersion":…, "migrations":[…]}`.
    public func json() throws -> String {
        struct Document: Encodable {
            let upToDate: Bool
            let currentVersion: Int64?
            let migrations: [Entry]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        let data = try encoder.encode(Document(upToDate: isUpToDate, currentVersion: currentVersion, migrations: entries))
        return String(decoding: data, as: UTF8.self)
    }
}
