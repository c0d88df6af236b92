import Foundation

/// An email address, normalised (trimmed, lower-cased) before it is checked or stored, so that
/// `Chris@Example.com ` and `chris@example.com` are one user.
public struct Email: Sendable, Hashable, CustomStringConvertible {
    public let normalized: String

    /// - Throws: `InvalidField("email", …)` for an empty value or one that is not an address.
    public init(_ raw: String) throws(InvalidField) {
        // Checked on every profile request: an ASCII address (nearly all of them) is checked on its bytes, which
        // the profile measured at a fifth of a request's client CPU when done with Foundation's string functions.
        // Same outcome as `normalizedUnicode`, which takes everything else (a test compares the two).
        switch Self.checkASCII(raw) {
        case .valid(let value): normalized = value
        case .failed(let failure): throw failure
        case .notASCII: normalized = try Self.normalizedUnicode(raw)
        }
    }

    static func normalizedUnicode(_ raw: String) throws(InvalidField) -> String {
        let value = raw.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        guard !value.isEmpty else { throw InvalidField("email", "is empty") }
        guard value.unicodeScalars.count <= 254 else { throw InvalidField("email", "is longer than 254 characters") }
        let parts = value.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[0].count <= 64,
              parts[1].contains("."), !parts[1].hasPrefix("."), !parts[1].hasSuffix("."), !parts[1].contains(".."),
              !value.contains(where: { $0.isWhitespace || $0 == "\u{0}" || $0.isNewline || $0 == "\"" || $0 == "," })
        else { throw InvalidField("email", "is not an email address") }
        return value
    }

    enum ASCIICheck {
        case valid(String)
        case failed(InvalidField)
        case notASCII
    }

    /// `normalizedUnicode` for an all-ASCII value, on its UTF-8 bytes. In ASCII, what Foundation trims and what
    /// `Character.isWhitespace`/`isNewline` match are the same six bytes (tab, LF, VT, FF, CR, space).
    static func checkASCII(_ raw: String) -> ASCIICheck {
        var raw = raw
        return raw.withUTF8 { bytes -> ASCIICheck in
            for byte in bytes where byte >= 0x80 { return .notASCII }
            func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }
            var start = 0
            var end = bytes.count
            while start < end, isSpace(bytes[start]) { start += 1 }
            while end > start, isSpace(bytes[end - 1]) { end -= 1 }
            let invalid = ASCIICheck.failed(InvalidField("email", "is not an email address"))
            guard end > start else { return .failed(InvalidField("email", "is empty")) }
            guard end - start <= 254 else { return .failed(InvalidField("email", "is longer than 254 characters")) }
            var at: Int?
            for index in start..<end {
                let byte = bytes[index]
                if isSpace(byte) || byte == 0 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: ",") { return invalid }
                if byte == UInt8(ascii: "@") {
                    if at != nil { return invalid }
                    at = index
                }
            }
            guard let at, at > start, at - start <= 64, at + 1 < end,
                  bytes[at + 1] != UInt8(ascii: "."), bytes[end - 1] != UInt8(ascii: ".") else { return invalid }
            var dot = false
            for index in (at + 1)..<end where bytes[index] == UInt8(ascii: ".") {
                if bytes[index - 1] == UInt8(ascii: ".") { return invalid }
                dot = true
            }
            guard dot else { return invalid }
            let count = end - start
            return .valid(String(unsafeUninitializedCapacity: count) { out in
                for offset in 0..<count {
                    let byte = bytes[start + offset]
                    out[offset] = (0x41...0x5A).contains(byte) ? byte | 0x20 : byte
                }
                return count
            })
        }
    }

    /// For logs: `c***@example.com`.
    public var redacted: String {
        guard let at = normalized.firstIndex(of: "@"), let first = normalized.first else { return "***" }
        return "\(first)***\(normalized[at...])"
    }

    /// Redacted, so that an email never reaches a log by accident.
    public var description: String { redacted }
}

/// Ids in logs: enough to correlate, not enough to use (`3f2a…`).
func redacted(_ id: UUID) -> String { String(id.uuidString.lowercased().prefix(4)) + "…" }
