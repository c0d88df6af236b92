import Foundation
import PoopyPalsData
import Values

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
