import Foundation
import PostgresClient

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

    private init(id: UUID, userID: UUID?, info: DeviceInfo, createdAt: Date, lastSeenAt: Date) {
        self.id = id
        self.userID = userID
        self.info = info
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
    }

    /// This device as linking it to `user` at `time` leaves it (what the profile function writes).
    func linked(to user: UUID, at time: Date) -> Device {
        Device(id: id, userID: user, info: info, createdAt: createdAt, lastSeenAt: time)
    }

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
