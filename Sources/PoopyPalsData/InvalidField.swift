/// Input that is refused before it reaches the database, naming the field. Never quotes the value.
public struct InvalidField: Error, Sendable, Equatable, CustomStringConvertible {
    /// The field's name as the API spells it (`bristolType`, `email`).
    public let field: String
    public let reason: String

    public init(_ field: String, _ reason: String) {
        self.field = field
        self.reason = reason
    }

    public var description: String { "\(field): \(reason)" }
}

/// A request that cannot be carried out as asked (as opposed to malformed input).
public enum RepositoryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A log with this client-generated id exists with other content (or belongs to another device).
    case logIDInUse
    /// The device has not registered itself yet (`PUT /v1/device`).
    case deviceNotRegistered
    /// The user to link does not exist.
    case userNotFound
    /// Another account (another token subject) already holds this email; nothing about it is revealed.
    case emailInUse
    /// A conflicting row exists but this transaction's snapshot cannot see it (REPEATABLE READ or stricter);
    /// retry the transaction.
    case conflictNotVisible
    /// A new device id (registration or rotation target) is not a random version-4 UUID.
    case weakDeviceID
    /// The rotation's new device id is already registered.
    case deviceIDInUse

    public var description: String {
        switch self {
        case .logIDInUse: return "a log with this id already exists with different content"
        case .deviceNotRegistered: return "this device is not registered; register it first"
        case .userNotFound: return "no such user"
        case .emailInUse: return "this email address belongs to another account"
        case .conflictNotVisible: return "a concurrent change conflicts with this transaction; retry it"
        case .weakDeviceID: return "a new device id must be a random (version 4) UUID"
        case .deviceIDInUse: return "the new device id is already registered"
        }
    }
}
