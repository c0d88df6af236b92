import Foundation
import Values

/// The API's JSON for its most frequent bodies (a log, a page of logs), written straight into bytes: the same
/// bytes `JSONResponse.encode` (Foundation's `JSONEncoder`, sorted keys) writes, which a test compares on
/// nasty input. Listing 20 logs, `JSONEncoder` was 41 % of the server's CPU in `make bench`'s profile.
struct JSONOutput {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    mutating func null() { raw("null") }

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

extension LogBody: JSONWritable {
    /// Keys in sorted order, as the encoder's `.sortedKeys` puts them.
    func write(to output: inout JSONOutput) throws {
        output.raw(#"{"bristolType":"#)
        output.integer(bristolType)
        output.raw(#","createdAt":"#)
        try output.timestamp(createdAt)
        output.raw(#","id":"#)
        output.uuid(id)
        output.raw(#","notes":"#)
        if let notes { output.string(notes) } else { output.null() }
        output.raw(#","occurredAt":"#)
        try output.timestamp(occurredAt)
        output.raw(#","updatedAt":"#)
        try output.timestamp(updatedAt)
        output.raw(#","version":"#)
        output.integer(version)
        output.raw("}")
    }
}

extension LogPageBody: JSONWritable {
    func write(to output: inout JSONOutput) throws {
        output.raw(#"{"items":["#)
        for (index, item) in items.enumerated() {
            if index > 0 { output.raw(",") }
            try item.write(to: &output)
        }
        output.raw(#"],"nextCursor":"#)
        if let nextCursor { output.string(nextCursor) } else { output.null() }
        output.raw("}")
    }
}

extension Array: JSONWritable where Element: JSONWritable {
    func write(to output: inout JSONOutput) throws {
        output.raw("[")
        for (index, item) in enumerated() {
            if index > 0 { output.raw(",") }
            try item.write(to: &output)
        }
        output.raw("]")
    }
}
