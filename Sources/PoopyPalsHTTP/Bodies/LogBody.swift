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
    /// Keys in sorted order, as the encoder's `.sortedKeys` puts them; `notes` is `null` when absent.
    func write(to output: inout JSONOutput) throws {
        output.raw(#"{"bristolType":"#)
        output.integer(bristolType)
        output.raw(#","createdAt":"#)
        try output.timestamp(createdAt)
        output.raw(#","id":"#)
        output.uuid(id)
        output.raw(#","notes":"#)
        output.string(notes)
        output.raw(#","occurredAt":"#)
        try output.timestamp(occurredAt)
        output.raw(#","updatedAt":"#)
        try output.timestamp(updatedAt)
        output.raw(#","version":"#)
        output.integer(version)
        output.raw("}")
    }
}
