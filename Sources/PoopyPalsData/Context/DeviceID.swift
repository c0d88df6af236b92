import Crypto
import PostgresClient
import Values
import Foundation

/// The identity of a device: a UUID it generated, treated like a password. Validated before anything is sent
/// to the database, and never printed: `description` is redacted, and errors do not quote the input.
///
/// The database never sees the id itself, only `key` (sql/0010): whoever reads a backup, a replica or a dump
/// finds keys, and a key sent as `X-Device-ID` is just another unknown device.
public struct DeviceID: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public let uuid: UUID
    /// What the database stores and `app.device_id` holds: `DeviceID.key(of: uuid)`, derived once.
    public let key: UUID

    /// Validates raw input (for example an `X-Device-ID` header).
    /// - Throws: `AuthenticationError` when the id is missing, not a UUID, or the nil UUID.
    public init(validating raw: String?) throws(AuthenticationError) {
        guard let raw, !raw.isEmpty else { throw .missingDeviceID }
        // Checked before parsing so that a 10 kB header costs nothing.
        guard raw.utf8.count == 36, let uuid = UUIDText.parse(raw) else { throw .invalidDeviceID }
        try self.init(uuid)
    }

    /// - Throws: `AuthenticationError.invalidDeviceID` for the nil UUID, which no device generates.
    public init(_ uuid: UUID) throws(AuthenticationError) {
        guard uuid != Self.nilUUID else { throw .invalidDeviceID }
        self.uuid = uuid
        key = Self.key(of: uuid)
    }

    public static let nilUUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))

    /// The one-way key of a device id: the first 16 bytes of SHA-256("poopypals.device.v1:" + the id in
    /// lower-case hyphenated form), read as a UUID. The same derivation as `poopypals_device_key()` in SQL.
    ///
    /// A fast digest without salt is enough, and deliberate: device ids are random 122-bit values (version 4,
    /// required for new devices), so there is nothing to guess that a slow hash or a salt would protect, and a
    /// fixed derivation lets an operator find a device from the id a person gives them
    /// (`poopypals devices key ID`). The prefix names the version so that a later scheme cannot collide.
    ///
    /// The 56 bytes hashed are written on the stack and the key read from the digest's bytes: a String, an Array
    /// and a generic walk over the digest cost as much as the hash (4.7 k instructions a request, the hash 4.8 k).
    public static func key(of uuid: UUID) -> UUID {
        let prefix: StaticString = "poopypals.device.v1:"
        let count = prefix.utf8CodeUnitCount
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: count + 36) { input -> UUID in
            guard let base = input.baseAddress else { return Self.nilUUID }  // never: the capacity is not 0
            base.update(from: prefix.utf8Start, count: count)
            let written = UUIDText.write(uuid, into: UnsafeMutableBufferPointer(rebasing: input[count...]))
            var hasher = SHA256()
            hasher.update(bufferPointer: UnsafeRawBufferPointer(UnsafeMutableBufferPointer(rebasing: input[..<(count + written)])))
            return hasher.finalize().withUnsafeBytes { digest -> UUID in
                var key = Self.nilUUID.uuid
                withUnsafeMutableBytes(of: &key) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: digest.prefix(16))) }
                return UUID(uuid: key)
            }
        }
    }

    /// True for a random (version 4, RFC 9562 variant) UUID: what a new device must use. Time-based and other
    /// versions are guessable; devices registered with one before this rule keep working.
    public var isStrong: Bool { Self.isStrong(uuid) }

    public static func isStrong(_ uuid: UUID) -> Bool {
        uuid.uuid.6 >> 4 == 4 && uuid.uuid.8 >> 6 == 0b10
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
