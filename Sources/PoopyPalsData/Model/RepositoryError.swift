/// A request that cannot be carried out as asked (as opposed to malformed input).
public enum RepositoryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A log of this device with this client-generated id exists with other content (ids are the device's own:
    /// another device's is a free id, sql/0018).
    case logIDInUse
    /// The device has not registered itself yet (`PUT /v1/device`).
    case deviceNotRegistered
    /// Another account (another token subject) already holds this email; nothing about it is revealed.
    case emailInUse
    /// A new device id (registration or rotation target) is not a random version-4 UUID.
    case weakDeviceID
    /// The rotation's new device id is already registered.
    case deviceIDInUse
    /// The device is linked to another subject's profile: it is not moved to this one (sql/0016).
    case deviceLinkedToAnotherProfile
    /// The device id's erasure has begun and not yet ended: it cannot be registered again until then (sql/0021).
    case deviceBeingErased

    public var description: String {
        switch self {
        case .logIDInUse: return "a log with this id already exists with different content"
        case .deviceNotRegistered: return "this device is not registered; register it first"
        case .emailInUse: return "this email address belongs to another account"
        case .weakDeviceID: return "a new device id must be a random (version 4) UUID"
        case .deviceIDInUse: return "the new device id is already registered"
        case .deviceLinkedToAnotherProfile: return "this device is linked to another account's profile"
        case .deviceBeingErased: return "this device id is being erased"
        }
    }
}
