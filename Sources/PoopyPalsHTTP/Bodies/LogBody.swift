import Foundation
import PoopyPalsData
import Values

struct LogBody: Encodable {
    let id: UUID
    let occurredAt: Date
    let bristolType: Int
    let notes: String?
    let createdAt: Date
    let updatedAt: Date
    let version: Int64

    init(_ log: PoopLog) {
        id = log.id
        occurredAt = log.occurredAt
        bristolType = log.bristolType
        notes = log.notes
        createdAt = log.createdAt
        updatedAt = log.updatedAt
        version = log.version
    }

    init(id: UUID, occurredAt: Date, bristolType: Int, notes: String?, createdAt: Date, updatedAt: Date, version: Int64) {
        self.id = id
        self.occurredAt = occurredAt
        self.bristolType = bristolType
        self.notes = notes
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.version = version
    }

    // Explicit so that a nil `notes` is sent as null rather than left out.
    enum CodingKeys: String, CodingKey { case id, occurredAt, bristolType, notes, createdAt, updatedAt, version }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id.lowercased, forKey: .id)
        try container.encode(occurredAt, forKey: .occurredAt)
        try container.encode(bristolType, forKey: .bristolType)
        try container.encode(notes, forKey: .notes)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(updatedAt, forKey: .updatedAt)
        try container.encode(version, forKey: .version)
    }
}

extension LogBody: JSONWritable {
    /// The bounded parts' 231 bytes at most, and the notes with a few escapes.
    var sizeHint: Int { 240 + (notes?.utf8.count ?? 0) }

    /// Keys in sorted order, as the encoder's `.sortedKeys` puts them; `notes` is `null` when absent. The parts
    /// around `notes` are of bounded size: each is written on the stack and appended once.
    func write(to output: inout JSONOutput) throws {
        // 15 + 20 + 15 + 20 + 9 + 36 + 11 = 126 bytes at most.
        try output.bounded(capacity: 160) { output in
            output.raw(#"{"bristolType":"#)
            output.integer(Int64(bristolType))
            output.raw(#","createdAt":""#)
            try output.unquotedTimestamp(createdAt)
            output.raw(#"","id":""#)
            output.unquotedUUID(id)
            output.raw(#"","notes":"#)
        }
        output.string(notes)
        // 16 + 20 + 16 + 20 + 12 + 20 + 1 = 105 bytes at most.
        try output.bounded(capacity: 128) { output in
            output.raw(#","occurredAt":""#)
            try output.unquotedTimestamp(occurredAt)
            output.raw(#"","updatedAt":""#)
            try output.unquotedTimestamp(updatedAt)
            output.raw(#"","version":"#)
            output.integer(version)
            output.raw("}")
        }
    }
}
