import Values
import Foundation

/// Why a value could not be decoded; `Row` wraps it with the column name into `PostgresDecodingError`.
public struct PostgresDecodingFailure: Error, Sendable {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
}

/// A Swift type that can be decoded from a column in PostgreSQL's text format.
public protocol PostgresDecodable {
    /// Decodes a non-NULL value.
    /// - Throws: `PostgresDecodingFailure` naming the reason, never quoting the value.
    static func decode(postgresText text: String, type: PostgresType) throws -> Self
    /// Decodes a non-NULL value from its UTF-8 bytes, as libpq holds them (valid only during the call). The
    /// default makes a `String` and calls `decode(postgresText:type:)`; the types read on every request (UUIDs,
    /// timestamps, integers) read the bytes themselves, with the same results and the same failures.
    static func decode(postgresBytes bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Self
    /// Decodes a non-NULL value in PostgreSQL's binary format (`PostgresQuery.binaryResults`): big-endian
    /// integers, 16-byte UUIDs, timestamps as microseconds since 2000. The default refuses, naming no value.
    static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Self
    /// The value for SQL NULL; throws for non-optional types.
    static func decodeNull() throws -> Self
}

extension PostgresDecodable {
    public static func decodeNull() throws -> Self { throw PostgresDecodingFailure("unexpected NULL") }

    public static func decode(postgresBytes bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Self {
        try decode(postgresText: String(decoding: bytes, as: UTF8.self), type: type)
    }

    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Self {
        throw PostgresDecodingFailure("\(Self.self) has no binary decoding: query it without binaryResults")
    }

    static func requireType(_ type: PostgresType, _ accepted: PostgresType...) throws {
        guard accepted.contains(type) else { throw PostgresDecodingFailure("incompatible column type") }
    }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static func decode(postgresText text: String, type: PostgresType) throws -> Self {
        try Wrapped.decode(postgresText: text, type: type)
    }
    public static func decode(postgresBytes bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Self {
        try Wrapped.decode(postgresBytes: bytes, type: type)
    }
    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Self {
        try Wrapped.decode(postgresBinary: bytes, type: type)
    }
    public static func decodeNull() throws -> Self { nil }
}

/// Any column can be read as its text representation; in binary format, only the textual types.
extension String: PostgresDecodable {
    public static func decode(postgresText text: String, type: PostgresType) throws -> String { text }
    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> String {
        try requireType(type, .text, .varchar, .bpchar, .name)
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// PostgreSQL's binary integers: big-endian, 2, 4 or 8 bytes as the column's type says.
private func decodeBinaryInteger<T: FixedWidthInteger>(_ bytes: UnsafeBufferPointer<UInt8>, _ type: PostgresType) throws -> T {
    let width: Int
    switch type {
    case .int2: width = 2
    case .int4, .oid: width = 4
    case .int8: width = 8
    default: throw PostgresDecodingFailure("incompatible column type")
    }
    guard bytes.count == width else { throw PostgresDecodingFailure("not a binary integer") }
    var value: Int64 = 0
    for byte in bytes { value = value << 8 | Int64(byte) }
    // Sign-extend the narrower widths (an oid is unsigned).
    if width < 8, type != .oid { value = (value << (64 - 8 * width)) >> (64 - 8 * width) }
    guard let result = T(exactly: value) else { throw PostgresDecodingFailure("value out of range for \(T.self)") }
    return result
}

/// 8 big-endian bytes as their unsigned value.
private func bigEndianUInt64(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
    bytes.reduce(0) { $0 << 8 | UInt64($1) }
}

extension Bool: PostgresDecodable {
    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Bool {
        try requireType(type, .bool)
        guard bytes.count == 1, bytes[0] <= 1 else { throw PostgresDecodingFailure("not a boolean") }
        return bytes[0] == 1
    }
    public static func decode(postgresText text: String, type: PostgresType) throws -> Bool {
        try requireType(type, .bool)
        switch text {
        case "t": return true
        case "f": return false
        default: throw PostgresDecodingFailure("not a boolean")
        }
    }
}

/// An integer column's digits, read from the bytes; anything else (numeric, a sign PostgreSQL does not print, out of
/// range) goes the `String` way, which also words the failure.
private func decodeInteger<T: FixedWidthInteger>(_ bytes: UnsafeBufferPointer<UInt8>, _ type: PostgresType) throws -> T {
    if type.isInteger, let value: T = parseDecimalDigits(bytes) { return value }
    return try decodeInteger(String(decoding: bytes, as: UTF8.self), type)
}

/// `-?[0-9]+` as `T`, or nil (also on overflow: every step is checked).
func parseDecimalDigits<T: FixedWidthInteger>(_ bytes: UnsafeBufferPointer<UInt8>) -> T? {
    let negative = bytes.first == UInt8(ascii: "-")
    var index = negative ? 1 : 0
    guard index < bytes.count else { return nil }
    var value: T = 0
    while index < bytes.count {
        let digit = bytes[index] &- 48
        guard digit < 10 else { return nil }
        let (shifted, overflowed) = value.multipliedReportingOverflow(by: 10)
        let (next, carried) = negative ? shifted.subtractingReportingOverflow(T(truncatingIfNeeded: digit))
                                       : shifted.addingReportingOverflow(T(truncatingIfNeeded: digit))
        guard !overflowed, !carried else { return nil }
        value = next
        index += 1
    }
    return value
}

private func decodeInteger<T: FixedWidthInteger>(_ text: String, _ type: PostgresType) throws -> T {
    guard type.isInteger || type == .numeric else { throw PostgresDecodingFailure("incompatible column type") }
    guard let value = T(text) else {
        throw PostgresDecodingFailure(Int64(text) != nil || type == .numeric
            ? "value out of range for \(T.self) or not an integer" : "not an integer")
    }
    return value
}

/// The integer types: the text form's digits (read from the bytes where they can be), or the big-endian binary form.
extension PostgresDecodable where Self: FixedWidthInteger {
    public static func decode(postgresText text: String, type: PostgresType) throws -> Self {
        try decodeInteger(text, type)
    }
    public static func decode(postgresBytes bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Self {
        try decodeInteger(bytes, type)
    }
    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Self {
        try decodeBinaryInteger(bytes, type)
    }
}

extension Int: PostgresDecodable {}
extension Int16: PostgresDecodable {}
extension Int32: PostgresDecodable {}
extension Int64: PostgresDecodable {}

extension Double: PostgresDecodable {
    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Double {
        switch (type, bytes.count) {
        case (.float8, 8): return Double(bitPattern: bigEndianUInt64(bytes))
        case (.float4, 4): return Double(Float(bitPattern: UInt32(truncatingIfNeeded: bigEndianUInt64(bytes))))
        case (.float8, _), (.float4, _): throw PostgresDecodingFailure("not a binary float")
        default:
            guard type.isInteger else { throw PostgresDecodingFailure("incompatible column type (use Decimal or String for numeric)") }
            return Double(try decodeBinaryInteger(bytes, type) as Int64)
        }
    }
    public static func decode(postgresText text: String, type: PostgresType) throws -> Double {
        // numeric is refused on purpose: it would silently lose precision. Use Decimal or String.
        guard type == .float8 || type == .float4 || type.isInteger else {
            throw PostgresDecodingFailure("incompatible column type (use Decimal or String for numeric)")
        }
        switch text {
        case "NaN": return .nan
        case "Infinity": return .infinity
        case "-Infinity": return -.infinity
        default:
            guard let value = Double(text) else { throw PostgresDecodingFailure("not a number") }
            return value
        }
    }
}

extension Decimal: PostgresDecodable {
    /// Refuses values that `Decimal` cannot hold exactly (it keeps 38 significant digits) rather than rounding.
    public static func decode(postgresText text: String, type: PostgresType) throws -> Decimal {
        guard type == .numeric || type.isInteger else { throw PostgresDecodingFailure("incompatible column type") }
        guard text != "NaN", !text.hasSuffix("Infinity") else {
            throw PostgresDecodingFailure("NaN and Infinity have no Decimal form")
        }
        guard let value = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) else {
            throw PostgresDecodingFailure("not a number")
        }
        let roundTrip = NSDecimalNumber(decimal: value).description(withLocale: Locale(identifier: "en_US_POSIX"))
        guard Self.canonical(roundTrip) == Self.canonical(text) else {
            throw PostgresDecodingFailure("more digits than Decimal holds; decode as String")
        }
        return value
    }

    /// Drops a leading `+`, leading zeros of the integer part and trailing zeros of the fraction.
    private static func canonical(_ text: String) -> String {
        var sign = ""
        var body = Substring(text)
        if body.first == "-" { sign = "-"; body = body.dropFirst() } else if body.first == "+" { body = body.dropFirst() }
        var integer = body
        var fraction: Substring = ""
        if let dot = body.firstIndex(of: ".") {
            integer = body[..<dot]
            fraction = body[body.index(after: dot)...]
        }
        while fraction.last == "0" { fraction = fraction.dropLast() }
        while integer.count > 1, integer.first == "0" { integer = integer.dropFirst() }
        if integer.isEmpty { integer = "0" }
        if integer == "0", fraction.isEmpty { sign = "" }
        return sign + integer + (fraction.isEmpty ? "" : "." + fraction)
    }
}

extension UUID: PostgresDecodable {
    public static func decode(postgresText text: String, type: PostgresType) throws -> UUID {
        try requireType(type, .uuid)
        guard let value = UUIDText.parse(text) else { throw PostgresDecodingFailure("not a UUID") }
        return value
    }
    public static func decode(postgresBytes bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> UUID {
        try requireType(type, .uuid)
        guard let value = UUIDText.parse(utf8: bytes) else { throw PostgresDecodingFailure("not a UUID") }
        return value
    }
    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> UUID {
        try requireType(type, .uuid)
        guard bytes.count == 16 else { throw PostgresDecodingFailure("not a binary UUID") }
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                           bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }
}

extension Date: PostgresDecodable {
    /// Reads timestamptz (any UTC offset), timestamp (taken as UTC) and date (midnight UTC).
    public static func decode(postgresText text: String, type: PostgresType) throws -> Date {
        try requireType(type, .timestamptz, .timestamp, .date)
        guard let value = PostgresDate.parse(text) else {
            throw PostgresDecodingFailure(text.hasSuffix("infinity")
                ? "infinite timestamps have no Date form" : "not an ISO timestamp (is DateStyle ISO?)")
        }
        return value
    }
    public static func decode(postgresBytes bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Date {
        try requireType(type, .timestamptz, .timestamp, .date)
        if let value = PostgresDate.parse(utf8: bytes) { return value }
        return try decode(postgresText: String(decoding: bytes, as: UTF8.self), type: type)  // words the failure
    }
    /// timestamptz and timestamp: microseconds since 2000-01-01 (UTC); date: days since then. The same `Date` as
    /// the text form gives; infinities and years outside 1…9999 are refused as there.
    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> Date {
        try requireType(type, .timestamptz, .timestamp, .date)
        let micros: Int64
        if type == .date {
            guard bytes.count == 4 else { throw PostgresDecodingFailure("not a binary date") }
            let since2000 = Int32(bitPattern: UInt32(truncatingIfNeeded: bigEndianUInt64(bytes)))
            guard since2000 != .max, since2000 != .min else { throw PostgresDecodingFailure("infinite timestamps have no Date form") }
            // Checked in days before multiplying: PostgreSQL's dates reach the year 5874897, whose microseconds
            // overflow 64 bits. 0001-01-01 and 9999-12-31, in days since 1970:
            let days = Int64(since2000) + PostgresDate.daysFrom1970To2000
            guard (-719_162 ... 2_932_896).contains(days) else { throw PostgresDecodingFailure("a timestamp outside the years 1 to 9999") }
            micros = days * 86_400_000_000
        } else {
            guard bytes.count == 8 else { throw PostgresDecodingFailure("not a binary timestamp") }
            let since2000 = Int64(bitPattern: bigEndianUInt64(bytes))
            guard since2000 != .max, since2000 != .min else { throw PostgresDecodingFailure("infinite timestamps have no Date form") }
            let (value, overflowed) = since2000.addingReportingOverflow(PostgresDate.daysFrom1970To2000 * 86_400_000_000)
            guard !overflowed else { throw PostgresDecodingFailure("a timestamp outside the years 1 to 9999") }
            micros = value
        }
        guard Date.representableMicroseconds.contains(micros) else { throw PostgresDecodingFailure("a timestamp outside the years 1 to 9999") }
        // As the text path makes it: the same Double for the same microseconds.
        return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
    }
}

extension Data: PostgresDecodable {
    public static func decode(postgresText text: String, type: PostgresType) throws -> Data {
        try requireType(type, .bytea)
        let utf8 = Array(text.utf8)
        guard utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x"), utf8.count % 2 == 0 else {
            throw PostgresDecodingFailure("bytea not in hex format (is bytea_output 'hex'?)")
        }
        func nibble(_ byte: UInt8) throws -> UInt8 {
            switch byte {
            case 48...57: return byte - 48
            case 97...102: return byte - 87
            case 65...70: return byte - 55
            default: throw PostgresDecodingFailure("invalid hex digit")
            }
        }
        var data = Data(capacity: (utf8.count - 2) / 2)
        var index = 2
        while index < utf8.count {
            data.append(try nibble(utf8[index]) << 4 | nibble(utf8[index + 1]))
            index += 2
        }
        return data
    }
}
