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

    /// An upper bound of this log's size in a response (its JSON object, with a sync change's wrapper): 320 bytes
    /// for everything but the notes, and each byte of the notes as escaped (`\u00XX` for a control character).
    public var responseSizeBound: Int {
        guard let notes else { return 320 }
        var size = 320
        for byte in notes.utf8 {
            size += byte < 0x20 ? 6 : (byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "/")) ? 2 : 1
        }
        return size
    }

    /// Notes as stored: an empty string is no notes (NULL), so that `"notes": ""` clears them.
    public static func storedNotes(_ notes: String?) -> String? {
        notes?.isEmpty == true ? nil : notes
    }

    /// Where a log's columns are in one result: looked up by name once, not for every row (7 lookups a row were
    /// 4 % of the server's instructions listing 20 logs).
    struct Columns {
        let id, occurredAt, bristolType, notes, createdAt, updatedAt, version: Int

        /// Each looked for first where `PoopLog.columns` puts it (first, in that order), then anywhere.
        init(_ result: QueryResult) throws {
            id = try result.column(named: "id", expectedAt: 0)
            occurredAt = try result.column(named: "occurred_at", expectedAt: 1)
            bristolType = try result.column(named: "bristol_type", expectedAt: 2)
            notes = try result.column(named: "notes", expectedAt: 3)
            createdAt = try result.column(named: "created_at", expectedAt: 4)
            updatedAt = try result.column(named: "updated_at", expectedAt: 5)
            version = try result.column(named: "version", expectedAt: 6)
        }
    }

    init(row: Row) throws {
        try self.init(row: row, columns: Columns(row.result))
    }

    init(row: Row, columns: Columns) throws {
        id = try row.decode(columns.id)
        occurredAt = try row.decode(columns.occurredAt)
        bristolType = try row.decode(columns.bristolType)
        notes = try row.decode(columns.notes)
        createdAt = try row.decode(columns.createdAt)
        updatedAt = try row.decode(columns.updatedAt)
        version = try row.decode(columns.version)
    }

    /// The logs of `rows`, all from `result`.
    static func decode(_ rows: some Sequence<Row>, of result: QueryResult) throws -> [PoopLog] {
        let columns = try Columns(result)
        return try rows.map { try PoopLog(row: $0, columns: columns) }
    }
}
