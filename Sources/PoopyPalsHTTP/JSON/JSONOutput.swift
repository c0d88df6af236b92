import Foundation
import Values

/// The API's one JSON writer: every body (errors and the streamed export included) is written straight into
/// bytes by its own `write(to:)`, keys in sorted order, an absent optional left out unless the body says `null`.
/// The bytes are those Foundation's `JSONEncoder` (sorted keys) writes for the same `Encodable` body, which
/// `JSONOutputTests` compares on nasty input. Listing 20 logs, `JSONEncoder` was 41 % of the server's CPU in
/// `make bench`'s profile.
struct JSONOutput {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    mutating func null() { raw("null") }

    mutating func bool(_ value: Bool) { value ? raw("true") : raw("false") }

    /// `"text"` or `null`.
    mutating func string(_ value: String?) {
        if let value { string(value) } else { null() }
    }

    /// `,"name":` before a key that is not the object's first (`first` says which), `"name":` else. Names are
    /// the API's own camelCase keys: nothing to escape.
    mutating func key(_ name: StaticString, first: inout Bool) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(UInt8(ascii: "\""))
        raw(name)
        raw("\":")
    }

    mutating func integer(_ value: some BinaryInteger) {
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Timestamps and UUIDs have nothing to escape, and are written without an intermediate string.
    mutating func timestamp(_ date: Date) throws {
        bytes.append(UInt8(ascii: "\""))
        try Timestamp.append(date, to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func uuid(_ value: UUID) {
        bytes.append(UInt8(ascii: "\""))
        UUIDText.appendLowercase(value, to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    /// A JSON string, escaped as `JSONEncoder` escapes it: `"` `\` and `/` with a backslash, the named control
    /// characters by name, the other ones below U+0020 as `\u00XX`; everything else as UTF-8.
    mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        defer { bytes.append(UInt8(ascii: "\"")) }
        // Most strings (ids, cursors, most notes) have nothing to escape: copied at once.
        if !value.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "/") }) {
            bytes.append(contentsOf: value.utf8)
            return
        }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): raw("\\\"")
            case UInt8(ascii: "\\"): raw("\\\\")
            case UInt8(ascii: "/"): raw("\\/")
            case 0x08: raw("\\b")
            case 0x0c: raw("\\f")
            case 0x0a: raw("\\n")
            case 0x0d: raw("\\r")
            case 0x09: raw("\\t")
            case 0x00..<0x20:
                raw("\\u00")
                bytes.append(Self.hex[Int(byte >> 4)])
                bytes.append(Self.hex[Int(byte & 0x0f)])
            default:
                bytes.append(byte)
            }
        }
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)
}

/// A body that writes itself as `JSONOutput`.
protocol JSONWritable {
    func write(to output: inout JSONOutput) throws
}

extension Array: JSONWritable where Element: JSONWritable {
    func write(to output: inout JSONOutput) throws {
        output.raw("[")
        try writeElements(to: &output)
        output.raw("]")
    }

    /// The elements without the brackets, joined by commas: a part of a streamed array.
    func writeElements(to output: inout JSONOutput) throws {
        for (index, item) in enumerated() {
            if index > 0 { output.raw(",") }
            try item.write(to: &output)
        }
    }
}

