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

extension DeviceBody: JSONWritable {
    /// Sorted keys; an absent optional is left out, as the encoder leaves it out.
    func write(to output: inout JSONOutput) throws {
        var first = true
        output.raw("{")
        if let appVersion { output.key("appVersion", first: &first); output.string(appVersion) }
        if let buildNumber { output.key("buildNumber", first: &first); output.string(buildNumber) }
        output.key("createdAt", first: &first)
        try output.timestamp(createdAt)
        output.key("id", first: &first)
        output.string(id)
        output.key("isSimulator", first: &first)
        output.bool(isSimulator)
        output.key("lastSeenAt", first: &first)
        try output.timestamp(lastSeenAt)
        if let model { output.key("model", first: &first); output.string(model) }
        if let osVersion { output.key("osVersion", first: &first); output.string(osVersion) }
        if let userId { output.key("userId", first: &first); output.string(userId) }
        output.raw("}")
    }
}
