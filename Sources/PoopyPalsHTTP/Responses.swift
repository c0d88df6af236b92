import Foundation
import PoopyPalsData
import PostgresClient

/// What the API returns, in camelCase.
struct DeviceBody: Encodable {
    let id: String
    let userId: String?
    let model: String?
    let osVersion: String?
    let appVersion: String?
    let buildNumber: String?
    let isSimulator: Bool
    let createdAt: Date
    let lastSeenAt: Date

    init(_ device: Device) {
        id = device.id.lowercased
        userId = device.userID?.lowercased
        model = device.info.model
        osVersion = device.info.osVersion
        appVersion = device.info.appVersion
        buildNumber = device.info.buildNumber
        isSimulator = device.info.isSimulator
        createdAt = device.createdAt
        lastSeenAt = device.lastSeenAt
    }
}

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

struct LogPageBody: Encodable {
    let items: [LogBody]
    let nextCursor: String?

    enum CodingKeys: String, CodingKey { case items, nextCursor }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(items, forKey: .items)
        try container.encode(nextCursor, forKey: .nextCursor)
    }
}

struct UserBody: Encodable {
    let id: String
    let email: String
    let fullName: String?
    let role: String
    let dateOfBirth: CalendarDate?
    let createdAt: Date
    let updatedAt: Date

    init(_ user: User) {
        id = user.id.lowercased
        email = user.email
        fullName = user.fullName
        role = user.role
        dateOfBirth = user.dateOfBirth
        createdAt = user.createdAt
        updatedAt = user.updatedAt
    }
}

struct ProfileBody: Encodable {
    let user: UserBody
    let device: DeviceBody?
}

extension UUID {
    /// The canonical lower-case form the API uses.
    var lowercased: String { UUIDText.lowercase(self) }
}
