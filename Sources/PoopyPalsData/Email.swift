import Foundation

/// An email address, normalised (trimmed, lower-cased) before it is checked or stored, so that
/// `Chris@Example.com ` and `chris@example.com` are one user.
public struct Email: Sendable, Hashable, CustomStringConvertible {
    public let normalized: String

    /// - Throws: `InvalidField("email", …)` for an empty value or one that is not an address.
    public init(_ raw: String) throws(InvalidField) {
        let value = raw.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        guard !value.isEmpty else { throw InvalidField("email", "is empty") }
        guard value.unicodeScalars.count <= 254 else { throw InvalidField("email", "is longer than 254 characters") }
        let parts = value.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[0].count <= 64,
              parts[1].contains("."), !parts[1].hasPrefix("."), !parts[1].hasSuffix("."), !parts[1].contains(".."),
              !value.contains(where: { $0.isWhitespace || $0 == "\u{0}" || $0.isNewline || $0 == "\"" || $0 == "," })
        else { throw InvalidField("email", "is not an email address") }
        normalized = value
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
