import Foundation

/// The identity of a device: a UUID it generated, treated like a password. Validated before anything is sent
/// to the database, and never printed: `description` is redacted, and errors do not quote the input.
public struct DeviceID: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public let uuid: UUID

    /// Validates raw input (for example an `X-Device-ID` header).
    /// - Throws: `AuthenticationError` when the id is missing, not a UUID, or the nil UUID.
    public init(validating raw: String?) throws(AuthenticationError) {
        guard let raw, !raw.isEmpty else { throw .missingDeviceID }
        // Checked before parsing so that a 10 kB header costs nothing.
        guard raw.utf8.count == 36, let uuid = UUID(uuidString: raw) else { throw .invalidDeviceID }
        try self.init(uuid)
    }

    /// - Throws: `AuthenticationError.invalidDeviceID` for the nil UUID, which no device generates.
    public init(_ uuid: UUID) throws(AuthenticationError) {
        guard uuid != UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)) else { throw .invalidDeviceID }
        self.uuid = uuid
    }

    public var description: String { "DeviceID(redacted)" }
    public var debugDescription: String { description }
}

/// The request carries no usable identity. Messages never quote what was sent.
public enum AuthenticationError: Error, Sendable, Equatable, CustomStringConvertible {
    case missingDeviceID
    case invalidDeviceID

    public var description: String {
        switch self {
        case .missingDeviceID: return "not authenticated: no device id was given"
        case .invalidDeviceID: return "not authenticated: the device id is not a valid UUID"
        }
    }
}
