import Foundation
import PostgresClient

/// A log entry. The device it belongs to is implicit: only that device ever sees it.
public struct PoopLog: Sendable, Equatable, Codable {
    public let id: UUID
    public let occurredAt: Date
    public let bristolType: Int
    public let notes: String?
    public let createdAt: Date
    public let updatedAt: Date
    /// The device's change number of this log's last change (sql/0009): what `baseVersion` compares with.
    public let version: Int64

    static let columns = "id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version"
    /// The database's limit on notes, in characters (code points, as `char_length` counts).
    public static let notesLimit = 2000

    /// `occurredAt` as stored (sql/0011): to the whole second, rounded down. Timestamps in responses are whole
    /// seconds too, so a value read and sent back is the same value.
    public static func storedTime(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }

    /// Notes as stored: an empty string is no notes (NULL), so that `"notes": ""` clears them.
    public static func storedNotes(_ notes: String?) -> String? {
        notes?.isEmpty == true ? nil : notes
    }

    init(row: Row) throws {
        id = try row.decode("id")
        occurredAt = try row.decode("occurred_at")
        bristolType = try row.decode("bristol_type")
        notes = try row.decode("notes")
        createdAt = try row.decode("created_at")
        updatedAt = try row.decode("updated_at")
        version = try row.decode("version")
    }
}
