import Values
import Foundation

/// A Swift value that can be sent as a bound parameter, in PostgreSQL's text format.
public protocol PostgresEncodable: Sendable {
    /// The text form of the value, or `nil` for SQL NULL.
    /// - Throws: `PostgresClientError.invalidParameter` when the value cannot travel intact.
    func postgresText() throws -> String?
}

extension String: PostgresEncodable {
    public func postgresText() throws -> String? {
        // libpq sends text parameters as C strings: a NUL would silently cut the value short.
        if containsNULByte {
            throw PostgresClientError(.invalidParameter,
                "a string parameter contains a NUL byte (U+0000), which PostgreSQL text cannot store")
        }
        return self
    }
}

extension Substring: PostgresEncodable {
    public func postgresText() throws -> String? { try String(self).postgresText() }
}

extension Bool: PostgresEncodable {
    public func postgresText() throws -> String? { self ? "true" : "false" }
}

extension Int: PostgresEncodable {
    public func postgresText() throws -> String? { String(self) }
}

extension Int16: PostgresEncodable {
    public func postgresText() throws -> String? { String(self) }
}

extension Int32: PostgresEncodable {
    public func postgresText() throws -> String? { String(self) }
}

extension Int64: PostgresEncodable {
    public func postgresText() throws -> String? { String(self) }
}

extension Double: PostgresEncodable {
    public func postgresText() throws -> String? {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return description  // shortest representation that round-trips
    }
}

extension Decimal: PostgresEncodable {
    public func postgresText() throws -> String? {
        if isNaN { return "NaN" }
        return NSDecimalNumber(decimal: self).description(withLocale: Locale(identifier: "en_US_POSIX"))
    }
}

extension UUID: PostgresEncodable {
    public func postgresText() throws -> String? { UUIDText.lowercase(self) }
}

extension Date: PostgresEncodable {
    /// Encoded in UTC with microsecond precision, PostgreSQL's own resolution.
    public func postgresText() throws -> String? { try PostgresDate.format(self) }
}

extension Data: PostgresEncodable {
    /// Encoded in bytea's hex format.
    public func postgresText() throws -> String? {
        var text = "\\x"
        text.reserveCapacity(2 + count * 2)
        let digits = Array("0123456789abcdef".utf8)
        var bytes = [UInt8]()
        bytes.reserveCapacity(count * 2)
        for byte in self {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0f)])
        }
        text += String(decoding: bytes, as: UTF8.self)
        return text
    }
}

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public func postgresText() throws -> String? {
        switch self {
        case .none: return nil
        case .some(let value): return try value.postgresText()
        }
    }
}

extension String {
    /// Whether the UTF-8 text holds a NUL, which a C string (all libpq takes) would silently end at. `memchr` on
    /// the contiguous bytes: checked for every statement and text parameter.
    var containsNULByte: Bool {
        utf8.withContiguousStorageIfAvailable { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else { return false }
            return memchr(base, 0, bytes.count) != nil
        } ?? utf8.contains(0)
    }
}
