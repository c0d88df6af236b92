import Foundation
import PostgresClient

/// A user row. `role` is decided by the server, never by a caller.
public struct User: Sendable, Equatable, Codable {
    public let id: UUID
    public let email: String
    public let fullName: String?
    public let role: String
    public let dateOfBirth: CalendarDate?
    public let createdAt: Date
    public let updatedAt: Date

    /// A legacy row may have no role: it reads as the default, never as a decoding failure.
    static let columns = "id, email, full_name, coalesce(role, 'student') AS role, date_of_birth, created_at, updated_at"

    init(row: Row) throws {
        id = try row.decode("id")
        email = try row.decode("email")
        fullName = try row.decode("full_name")
        role = try row.decode("role")
        dateOfBirth = try row.decode("date_of_birth")
        createdAt = try row.decode("created_at")
        updatedAt = try row.decode("updated_at")
    }
}

/// What a device says about itself when it registers (on every launch).
public struct DeviceInfo: Sendable, Equatable, Codable {
    public var model: String?
    public var osVersion: String?
    public var appVersion: String?
    public var buildNumber: String?
    public var isSimulator: Bool

    public init(model: String? = nil, osVersion: String? = nil, appVersion: String? = nil,
                buildNumber: String? = nil, isSimulator: Bool = false) {
        self.model = model
        self.osVersion = osVersion
        self.appVersion = appVersion
        self.buildNumber = buildNumber
        self.isSimulator = isSimulator
    }

    /// - Throws: `InvalidField` naming the first field that is too long.
    func validate() throws(InvalidField) {
        for (field, value, limit) in [("model", model, 100), ("osVersion", osVersion, 50),
                                      ("appVersion", appVersion, 50), ("buildNumber", buildNumber, 50)] {
            if let value, value.unicodeScalars.count > limit { throw InvalidField(field, "is longer than \(limit) characters") }
        }
    }
}

/// A device row.
public struct Device: Sendable, Equatable, Codable {
    /// The device's own id (the one it authenticates with), never read from the database: the database holds
    /// only its key (sql/0010).
    public let id: UUID
    public let userID: UUID?
    public let info: DeviceInfo
    public let createdAt: Date
    public let lastSeenAt: Date

    static let columns = "user_id, model, os_version, app_version, build_number, is_simulator, created_at, last_seen_at"

    init(row: Row, id: DeviceID) throws {
        self.id = id.uuid
        userID = try row.decode("user_id")
        info = DeviceInfo(model: try row.decode("model"), osVersion: try row.decode("os_version"),
                          appVersion: try row.decode("app_version"), buildNumber: try row.decode("build_number"),
                          isSimulator: try row.decode("is_simulator"))
        createdAt = try row.decode("created_at")
        lastSeenAt = try row.decode("last_seen_at")
    }
}

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
