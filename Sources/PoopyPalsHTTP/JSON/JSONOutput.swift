import Foundation
import Values

/// The API's one JSON writer: every body (errors and the streamed export included) is written straight into
/// bytes by its own `write(to:)`, keys in sorted order, an absent optional left out unless the body says `null`.
/// The bytes are those Foundation's `JSONEncoder` (sorted keys) writes for the same `Encodable` body, which
/// `JSONOutputTests` compares on nasty input. Listing 20 logs, `JSONEncoder` was 41 % of the server's CPU in
/// `make bench`'s profile.
struct JSONOutput {
    private(set) var bytes: [UInt8] = []
    /// Kept across the bounded pieces: the timestamps of a body mostly fall on a few days.
    private var recentDay = Timestamp.RecentDay()

    init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    @inline(__always)
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
        // Most strings (ids, cursors, most notes) have nothing to escape: copied at once, from the string's own
        // contiguous bytes when it has them (every native string).
        let copied = value.utf8.withContiguousStorageIfAvailable { utf8 -> Bool in
            for byte in utf8 where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "/") {
                return false
            }
            bytes.append(contentsOf: utf8)
            return true
        }
        if copied == true { return }
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

    /// Writes the pieces of bounded size `write` gives (keys, numbers, timestamps, UUIDs: no free text) into a
    /// buffer of `capacity` bytes on the stack, then appends them at once: a log took 14 appends of a few bytes
    /// each, 94 instructions apiece. A body larger than `capacity` throws `JSONOutput.Overflow`, never writes past it.
    mutating func bounded(capacity: Int, _ write: (inout BoundedJSON) throws -> Void) throws {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            var output = BoundedJSON(buffer: buffer, recentDay: recentDay)
            try write(&output)
            recentDay = output.recentDay
            guard !output.overflowed else { throw Overflow() }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<output.count]))
        }
    }

    /// A body outgrew the capacity its writer declared: a bug, answered as an internal error.
    struct Overflow: Error {}
}

/// `JSONOutput`'s bounded pieces, written into a fixed buffer: nothing is written past its end (`overflowed`
/// says that something did not fit).
struct BoundedJSON {
    private let buffer: UnsafeMutableBufferPointer<UInt8>
    private(set) var count = 0
    private(set) var overflowed = false
    fileprivate(set) var recentDay: Timestamp.RecentDay

    init(buffer: UnsafeMutableBufferPointer<UInt8>, recentDay: Timestamp.RecentDay) {
        self.buffer = buffer
        self.recentDay = recentDay
    }

    private var rest: UnsafeMutableBufferPointer<UInt8> { UnsafeMutableBufferPointer(rebasing: buffer[count...]) }

    /// Inlined: its text is a constant where it is called, so is its length, and the copy is a few moves (a call
    /// to `memcpy` was 53 instructions a key, 160 keys in a list of 20 logs).
    @inline(__always)
    mutating func raw(_ text: StaticString) {
        let length = text.utf8CodeUnitCount
        guard length <= buffer.count - count, let base = buffer.baseAddress else { overflowed = true; return }
        (base + count).update(from: text.utf8Start, count: length)
        count += length
    }

    mutating func integer(_ value: Int64) {
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits and a sign
        let written = withUnsafeMutableBytes(of: &digits) { scratch -> Int in
            var start = scratch.count
            repeat {
                start -= 1
                scratch[start] = UInt8(truncatingIfNeeded: 48 &+ magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                start -= 1
                scratch[start] = UInt8(ascii: "-")
            }
            let length = scratch.count - start
            guard length <= buffer.count - count, let base = buffer.baseAddress else { return -1 }
            for offset in 0..<length { base[count + offset] = scratch[start + offset] }
            return length
        }
        if written < 0 { overflowed = true } else { count += written }
    }

    /// The timestamp's 20 characters, without quotes: the caller's keys carry them (`","createdAt":"`), one
    /// copy fewer per piece.
    mutating func unquotedTimestamp(_ date: Date) throws {
        let written = try Timestamp.write(date, into: rest, recent: &recentDay)
        if written == 0 { overflowed = true }
        count += written
    }

    /// The UUID's 36 characters, without quotes (see `unquotedTimestamp`).
    mutating func unquotedUUID(_ value: UUID) {
        let written = UUIDText.write(value, into: rest)
        if written == 0 { overflowed = true }
        count += written
    }
}

/// A body that writes itself as `JSONOutput`.
protocol JSONWritable {
    func write(to output: inout JSONOutput) throws
    /// The bytes to reserve before writing: a guess, since a body too large for it only grows its array (a page
    /// of 20 logs grew a 256-byte one five times).
    var sizeHint: Int { get }
}

extension JSONWritable {
    var sizeHint: Int { 256 }
}

extension Array: JSONWritable where Element: JSONWritable {
    var sizeHint: Int { 2 + reduce(0) { $0 + $1.sizeHint + 1 } }

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

