import Foundation

/// An email address in its one canonical form: what is stored in `users.email` (sql/0012 checks what SQL can), what
/// the unique constraint compares, and what the monitor and the merge group by. It is defined here only.
///
/// Standards, and why each:
/// - UAX #15 normalisation to NFKC: canonically equivalent spellings (á precomposed, or a + U+0301, which keyboards
///   and platforms choose between) and compatibility-equivalent ones (fullwidth ａ, the ligature ﬁ, the Kelvin sign,
///   the Ångström sign) are one address, as a person reads them.
/// - For the local part, Unicode *simple* case folding (CaseFolding.txt, statuses C and S), then NFKC again: ß stays
///   ß (full folding made it ss, and mail servers treat straße and strasse as two mailboxes, so one address could
///   squat another: issue 42, item 6); ẞ folds to ß, final ς to σ, the Kelvin sign to k. A letter with no simple
///   folding whose lower case is longer (İ) takes its lower case, which the database's lower() check requires.
/// - The domain must be a host name after mapping (RFC 1123 LDH labels, or IDNA A-labels): no address literal
///   (`[127.0.0.1]`), no label beginning or ending with a hyphen, no `_`, and no character that NFKC turns into a
///   separator or punctuation (U+2024 ONE DOT LEADER is not a dot, ⑴ is not a label, ℀ is not a/c).
/// - UTS #46 (non-transitional) / IDNA 2008 for the domain: labels are mapped (full folding) but keep ß and ς
///   (faß.de and fass.de are two registered domains), and every label that is not ASCII becomes its A-label
///   (`xn--` + Punycode, RFC 3492), so `exämple.com` and `xn--exmple-cua.com` are one domain; an `xn--` label
///   given as such must decode, and is stored as the A-label of its canonical U-label.
/// - RFC 6530/6531 (internationalised email): the local part keeps its Unicode. Folding its case is our policy:
///   RFC 5321 lets a server treat case as significant, no provider a person uses does, and one person must not
///   become two users.
/// Refused with a clear error, never silently dropped: control characters (a trailing newline included), format
/// and other default-ignorable code points (zero-width space and joiner, bidi controls: invisible, so two different
/// addresses would look the same), unassigned, private-use and noncharacter code points, and spaces other than
/// surrounding ASCII ones. Letters of different scripts that look alike (Cyrillic а, Latin a) stay different
/// addresses: every standard above keeps them apart, and they can be different mailboxes.
public struct Email: Sendable, Hashable, CustomStringConvertible {
    /// The canonical form (the name predates the Unicode rules).
    public let normalized: String

    /// - Throws: `InvalidField("email", …)` for an empty value, one that is not an address, or one that holds a
    ///   character listed above as refused.
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

    /// The canonical form under which a value already stored (perhaps before these rules) counts as the same
    /// person: surrounding whitespace, control and default-ignorable characters are dropped first, as UTS #46
    /// maps ignorables to nothing. Nil when it is still not an address. For grouping and repairing old rows only:
    /// new input with such characters is refused (`init`).
    public static func comparisonKey(forStored stored: String) -> String? {
        let kept = stored.unicodeScalars.filter { scalar in
            scalar == " " || !(scalar.properties.isDefaultIgnorableCodePoint || scalar.properties.generalCategory == .control
                               || scalar.properties.generalCategory == .format)
        }
        return try? Email(String(String.UnicodeScalarView(kept)).trimmingCharacters(in: .whitespacesAndNewlines)).normalized
    }

    static let invisible = InvalidField("email", "contains an invisible, control or unassigned character")
    static let notAnAddress = InvalidField("email", "is not an email address")

    /// Whether `scalar` may appear in an address at all (before mapping).
    static func isAllowed(_ scalar: Unicode.Scalar) -> Bool {
        if scalar == " " { return true }  // refused inside an address by the structure check, with its own message
        let properties = scalar.properties
        if properties.isDefaultIgnorableCodePoint || properties.isNoncharacterCodePoint { return false }
        switch properties.generalCategory {
        case .control, .format, .unassigned, .privateUse, .surrogate, .lineSeparator, .paragraphSeparator, .spaceSeparator:
            return false
        default:
            return true
        }
    }

    /// Unicode default full case folding (CaseFolding.txt, statuses C and F) from the standard library's case
    /// mappings, which is all it offers (no folding function): lower-case, upper-case, lower-case. That is folding
    /// everywhere but in two places: dotless ı stays a letter of its own, as folding has it (upper-casing would make
    /// it I, then i); Cherokee ends in its small letters where folding picks the capitals (the same classes, and
    /// PostgreSQL's lower() keeps small letters, so users_email_normalized holds). With `keepingDeviations`, ß and ς
    /// are kept, as UTS #46 (non-transitional) keeps them in domain names: faß.de and fass.de are two domains.
    static func caseFolded(_ text: String, keepingDeviations: Bool = false) -> String {
        var folded = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if scalar.isASCII {
                folded.append((0x41...0x5A).contains(scalar.value) ? Unicode.Scalar(UInt8(scalar.value) | 0x20) : scalar)
                continue
            }
            if scalar == "\u{131}" || (keepingDeviations && (scalar == "\u{DF}" || scalar == "\u{3C2}")) {
                folded.append(scalar)
                continue
            }
            // Lower-casing first takes ẞ to ß, which upper-cases to SS; String's mappings are the full ones
            // (Unicode.Scalar.Properties.uppercaseMapping gave ß for ß here).
            for upper in String(scalar).lowercased().uppercased().unicodeScalars {
                folded.append(contentsOf: String(upper).lowercased().unicodeScalars)
            }
        }
        return String(folded)
    }

    /// Unicode simple case folding (statuses C and S) from the standard library's mappings: a letter's lower case
    /// when it is one scalar, then lower(upper(that)) when that round trip stays one scalar (ς → σ, ϐ → β, ſ → s,
    /// Cherokee to its small letters as `caseFolded` has it). ß and ẞ end in ß (their upper case is SS: not simple).
    /// A letter whose lower case is longer (İ: i + U+0307) takes it, as full folding does: simple folding leaves it
    /// upper case, which the database's `email = lower(email)` refuses.
    static func simpleCaseFolded(_ text: String) -> String {
        var folded = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if scalar.isASCII {
                folded.append((0x41...0x5A).contains(scalar.value) ? Unicode.Scalar(UInt8(scalar.value) | 0x20) : scalar)
                continue
            }
            if scalar == "\u{131}" {  // dotless ı is a letter of its own
                folded.append(scalar)
                continue
            }
            let lower = String(scalar).lowercased().unicodeScalars
            guard lower.count == 1, let single = lower.first else {
                folded.append(contentsOf: lower)
                continue
            }
            let upper = String(single).uppercased().unicodeScalars
            guard upper.count == 1, let round = upper.first else {
                folded.append(single)
                continue
            }
            let again = String(round).lowercased().unicodeScalars
            folded.append(contentsOf: again.count == 1 ? again : lower)
        }
        return String(folded)
    }

    /// NFKC, case folding, NFKC: the mapping of the local part (simple folding) and, keeping the deviations, of
    /// domain labels (full folding, as UTS #46 maps them).
    static func mapped(_ text: String, keepingDeviations: Bool = false) -> String {
        let compatible = text.precomposedStringWithCompatibilityMapping
        let folded = keepingDeviations ? caseFolded(compatible, keepingDeviations: true) : simpleCaseFolded(compatible)
        return folded.precomposedStringWithCompatibilityMapping
    }

    /// RFC 1123 host name label (after mapping, so an A-label or ASCII): letters, digits and hyphens, neither first
    /// nor last a hyphen.
    static func isHostLabel(_ label: some Collection<UInt8>) -> Bool {
        guard let first = label.first, let last = label.reversed().first, first != UInt8(ascii: "-"), last != UInt8(ascii: "-") else {
            return false
        }
        return label.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "-")
        }
    }

    static let notAHostName = InvalidField("email", "has a domain that is not a host name (letters, digits and hyphens)")

    /// Label separators of UTS #46 before mapping: the full stop, and the ideographic, fullwidth and halfwidth ones.
    static func isLabelSeparator(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "." || scalar == "\u{3002}" || scalar == "\u{FF0E}" || scalar == "\u{FF61}"
    }

    /// Only surrounding ASCII spaces are taken away; any other space, tab or newline makes the value invalid.
    static func trimmedSpaces(_ raw: String) -> Substring {
        let scalars = raw.unicodeScalars
        guard let first = scalars.firstIndex(where: { $0 != " " }), let last = scalars.lastIndex(where: { $0 != " " }) else {
            return ""
        }
        return Substring(scalars[first...last])
    }

    static func normalizedUnicode(_ raw: String) throws(InvalidField) -> String {
        let trimmed = trimmedSpaces(raw)
        guard !trimmed.isEmpty else { throw InvalidField("email", "is empty") }
        guard trimmed.unicodeScalars.allSatisfy(isAllowed) else { throw invisible }
        // NFKC first (a fullwidth ＠ or ． is the ASCII one), then the structure, on scalars: as Characters, a
        // combining mark after "@" would hide it inside one grapheme.
        let value = String(trimmed).precomposedStringWithCompatibilityMapping
        guard value.unicodeScalars.allSatisfy(isAllowed) else { throw invisible }
        // A separator NFKC made from something else (U+2024 ONE DOT LEADER is a dot after NFKC, and so are the
        // dots inside ⒈): refused, not taken as the label break it looks like.
        let separators = { (text: Substring.UnicodeScalarView) in text.filter(isLabelSeparator).count }
        guard separators(trimmed.unicodeScalars) == separators(Substring(value).unicodeScalars) else { throw notAHostName }
        guard value.unicodeScalars.count <= 254 else { throw InvalidField("email", "is longer than 254 characters") }
        let scalars = Array(value.unicodeScalars)
        guard !scalars.contains(where: { $0.properties.isWhitespace || $0 == "\"" || $0 == "," }),
              let at = scalars.firstIndex(of: "@"), scalars.lastIndex(of: "@") == at
        else { throw notAnAddress }
        let local = mapped(String(String.UnicodeScalarView(scalars[..<at])))
        // Ideographic full stops separate labels in UTS #46; NFKC leaves U+3002 as it is.
        let domain = String(String.UnicodeScalarView(scalars[(at + 1)...].map { $0 == "\u{3002}" ? "." : $0 }))
        let labels = domain.unicodeScalars.split(separator: ".", omittingEmptySubsequences: false)
        guard !local.isEmpty, local.count <= 64, labels.count >= 2, labels.allSatisfy({ !$0.isEmpty }) else { throw notAnAddress }
        let aLabels = try labels.map { label throws(InvalidField) in
            try aLabel(Substring(String(String.UnicodeScalarView(Array(label)))))
        }
        guard aLabels.allSatisfy({ isHostLabel($0.utf8) }) else { throw notAHostName }
        let mappedDomain = aLabels.joined(separator: ".")
        guard local.unicodeScalars.allSatisfy(isAllowed), !local.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0 == "@" })
        else { throw invisible }
        guard mappedDomain.utf8.count <= 253 else { throw InvalidField("email", "has a domain longer than 253 characters") }
        let address = local + "@" + mappedDomain
        guard address.unicodeScalars.count <= 254 else { throw InvalidField("email", "is longer than 254 characters") }
        return address
    }

    /// The A-label of one domain label (after NFKC): ASCII is lower-cased, an `xn--` label is decoded and
    /// re-encoded from its canonical U-label, anything else is mapped (keeping ß and ς) and encoded.
    static func aLabel(_ label: Substring) throws(InvalidField) -> String {
        let invalid = InvalidField("email", "has a domain name that is not valid IDNA")
        var scalars = Array(label.unicodeScalars)
        if scalars.allSatisfy(\.isASCII) {
            let lower = caseFolded(String(label))
            guard lower.hasPrefix("xn--") else {
                guard lower.utf8.count <= 63 else { throw InvalidField("email", "has a domain label longer than 63 characters") }
                return lower
            }
            guard let decoded = Punycode.decode(String(lower.dropFirst(4))), !decoded.allSatisfy(\.isASCII),
                  decoded.allSatisfy(isAllowed)
            else { throw invalid }
            scalars = Array(mapped(String(String.UnicodeScalarView(decoded)), keepingDeviations: true).unicodeScalars)
        } else {
            scalars = Array(mapped(String(label), keepingDeviations: true).unicodeScalars)
        }
        // IDNA 2008 (RFC 5891 4.2.3.2): a label does not begin with a combining mark.
        guard scalars.allSatisfy(isAllowed), let first = scalars.first,
              ![.nonspacingMark, .spacingMark, .enclosingMark].contains(first.properties.generalCategory)
        else { throw invalid }
        // RFC 5891 4.2.3.1: nor does it begin or end with a hyphen (its A-label would hide that).
        guard first != "-", scalars.last != "-" else { throw notAHostName }
        // Letters, marks, digits and hyphens: what IDNA 2008 lets a label hold, near enough for a key.
        guard scalars.allSatisfy({ scalar in
            scalar == "-" || scalar.properties.isAlphabetic || scalar.properties.generalCategory == .decimalNumber
                || scalar.properties.generalCategory == .nonspacingMark || scalar.properties.generalCategory == .spacingMark
        }), let encoded = Punycode.encode(scalars) else { throw invalid }
        let result = scalars.allSatisfy(\.isASCII) ? String(String.UnicodeScalarView(scalars)) : "xn--" + encoded
        guard result.utf8.count <= 63 else { throw InvalidField("email", "has a domain label longer than 63 characters") }
        return result
    }

    enum ASCIICheck {
        case valid(String)
        case failed(InvalidField)
        case notASCII
    }

    /// `normalizedUnicode` for an all-ASCII value without A-labels, on its UTF-8 bytes: there NFKC and case folding
    /// are ASCII lower-casing, and the only allowed character the structure check refuses is the space.
    static func checkASCII(_ raw: String) -> ASCIICheck {
        var raw = raw
        return raw.withUTF8 { bytes -> ASCIICheck in
            for byte in bytes where byte >= 0x80 { return .notASCII }
            // Only surrounding spaces are trimmed; a tab or newline anywhere is a control character.
            var start = 0
            var end = bytes.count
            while start < end, bytes[start] == 0x20 { start += 1 }
            while end > start, bytes[end - 1] == 0x20 { end -= 1 }
            let invalid = ASCIICheck.failed(Email.notAnAddress)
            guard end > start else { return .failed(InvalidField("email", "is empty")) }
            for index in start..<end where bytes[index] < 0x20 || bytes[index] == 0x7F { return .failed(Email.invisible) }
            guard end - start <= 254 else { return .failed(InvalidField("email", "is longer than 254 characters")) }
            var at: Int?
            for index in start..<end {
                let byte = bytes[index]
                if byte == 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: ",") { return invalid }
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
            // Domain labels: an A-label (`xn--…`) is decoded by the general path; others are at most 63 bytes.
            var labelStart = at + 1
            for index in (at + 1)...end where index == end || bytes[index] == UInt8(ascii: ".") {
                if index - labelStart >= 4, bytes[labelStart] | 0x20 == UInt8(ascii: "x"), bytes[labelStart + 1] | 0x20 == UInt8(ascii: "n"),
                   bytes[labelStart + 2] == UInt8(ascii: "-"), bytes[labelStart + 3] == UInt8(ascii: "-") {
                    return .notASCII
                }
                if index - labelStart > 63 { return .failed(InvalidField("email", "has a domain label longer than 63 characters")) }
                if !Email.isHostLabel(UnsafeBufferPointer(rebasing: bytes[labelStart..<index])) { return .failed(Email.notAHostName) }
                labelStart = index + 1
            }
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
