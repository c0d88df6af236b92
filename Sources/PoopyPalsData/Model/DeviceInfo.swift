import Foundation
import PostgresClient

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
