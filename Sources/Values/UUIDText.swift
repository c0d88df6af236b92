import Foundation

/// UUIDs to and from their 36-character text form without Foundation's `UUID(uuidString:)` and `uuidString`,
/// which on Linux go through `sscanf` and `snprintf`: in `make bench`'s profile of "list 20 newest logs" that
/// parsing alone was 7.5 % of the client's CPU (20 rows × 1 id, plus the device key per request).
public enum UUIDText {
    /// A random (version 4) UUID from the system's generator. Foundation's `UUID()` on Linux opens, reads and
    /// closes /dev/urandom for every id; `RandomBytes` reads it 256 ids at a time.
    public static func random() -> UUID {
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &bytes) { raw in
            RandomBytes.shared.fill(raw)
            raw[6] = raw[6] & 0x0F | 0x40  // version 4
            raw[8] = raw[8] & 0x3F | 0x80  // RFC 4122 variant
        }
        return UUID(uuid: bytes)
    }

    /// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in either case, as `UUID(uuidString:)` does; nil for anything
    /// else (another length, a misplaced hyphen, a character that is not a hex digit).
    public static func parse(_ text: some StringProtocol) -> UUID? {
        var copy = String(text)
        return copy.withUTF8 { parse(utf8: $0) }
    }

    /// `parse(_:)` on UTF-8 bytes (libpq's buffer for a value): no String made on the way.
    public static func parse(utf8 bytes: UnsafeBufferPointer<UInt8>) -> UUID? {
        guard bytes.count == 36, bytes[8] == hyphen, bytes[13] == hyphen, bytes[18] == hyphen, bytes[23] == hyphen
        else { return nil }
        var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let valid = withUnsafeMutableBytes(of: &raw) { out -> Bool in
            var input = 0
            for index in 0..<16 {
                if input == 8 || input == 13 || input == 18 || input == 23 { input += 1 }
                guard let high = value(of: bytes[input]), let low = value(of: bytes[input + 1]) else { return false }
                out[index] = high << 4 | low
                input += 2
            }
            return true
        }
        return valid ? UUID(uuid: raw) : nil
    }

    /// The lower-case hyphenated form (what PostgreSQL prints, and what our API sends).
    public static func lowercase(_ uuid: UUID) -> String {
        String(unsafeUninitializedCapacity: 36) { write(uuid, into: $0) }
    }

    /// Appends the lower-case form's 36 bytes to `bytes` (no intermediate string): written on the stack, then
    /// copied in once.
    public static func appendLowercase(_ uuid: UUID, to bytes: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { buffer in
            _ = write(uuid, into: buffer)
            bytes.append(contentsOf: UnsafeBufferPointer(buffer))
        }
    }

    /// "00", "01" … "ff": a byte's two hex digits in one lookup (a constant `StaticString`, read through a pointer:
    /// no lazy-initialisation check, no bounds check).
    static let hexPairs: StaticString = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"

    /// Writes the lower-case form into `buffer` (36 bytes); answers the bytes written, 0 when the buffer is smaller.
    /// Straight-line, a byte's two digits from `hexPairs`: a loop over a global table cost 840 instructions per
    /// UUID (its lazy-initialisation check and a bounds check per digit), two digits computed per byte 344
    /// (callgrind, `GET /v1/logs`).
    public static func write(_ uuid: UUID, into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
        guard buffer.count >= 36, let out = buffer.baseAddress else { return 0 }
        let pairs = hexPairs.utf8Start
        @inline(__always) func put(_ byte: UInt8, at offset: Int) {
            let index = Int(truncatingIfNeeded: byte) &* 2
            out[offset] = pairs[index]
            out[offset &+ 1] = pairs[index &+ 1]
        }
        let u = uuid.uuid
        put(u.0, at: 0); put(u.1, at: 2); put(u.2, at: 4); put(u.3, at: 6)
        out[8] = UInt8(ascii: "-")
        put(u.4, at: 9); put(u.5, at: 11)
        out[13] = UInt8(ascii: "-")
        put(u.6, at: 14); put(u.7, at: 16)
        out[18] = UInt8(ascii: "-")
        put(u.8, at: 19); put(u.9, at: 21)
        out[23] = UInt8(ascii: "-")
        put(u.10, at: 24); put(u.11, at: 26); put(u.12, at: 28); put(u.13, at: 30); put(u.14, at: 32); put(u.15, at: 34)
        return 36
    }

    private static let hyphen = UInt8(ascii: "-")

    private static func value(of character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
