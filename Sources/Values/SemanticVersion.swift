/// A release number, `MAJOR.MINOR.PATCH` (semantic versioning 2.0.0, without pre-release or build parts), compared
/// field by field: `1.10.0` is newer than `1.9.3`.
public struct SemanticVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let major: Int
    public let minor: Int
    public let patch: Int

    public init(_ major: Int, _ minor: Int, _ patch: Int) {
        (self.major, self.minor, self.patch) = (major, minor, patch)
    }

    /// `1.2.3` exactly: three decimal fields of at most 6 digits, no sign, no leading zero (semver's rule), nothing
    /// around them. Nil otherwise.
    public init?(_ text: some StringProtocol) {
        let fields = text.split(separator: ".", omittingEmptySubsequences: false)
        guard fields.count == 3 else { return nil }
        var numbers: [Int] = []
        for field in fields {
            guard (1...6).contains(field.utf8.count), field.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  field.utf8.count == 1 || field.utf8.first != 0x30, let number = Int(field)
            else { return nil }
            numbers.append(number)
        }
        self.init(numbers[0], numbers[1], numbers[2])
    }

    public var description: String { "\(major).\(minor).\(patch)" }

    public static func < (lhs: SemanticVersion, rhs: SemanticVersion) -> Bool {
        (lhs.major, lhs.minor, lhs.patch) < (rhs.major, rhs.minor, rhs.patch)
    }
}
