/// The one way a duration is written in this project's configuration, options and environment: a number and a
/// unit, `500ms`, `5s`, `1.5s`, `2m`, `24h`, `7d`. The unit is required: a bare `5` would be 5 s to one reader and 5 ms to
/// another (PostgreSQL's `statement_timeout`). At most 7 integer digits and 3 decimals, no sign, no exponent, no
/// spaces, ASCII digits only, so that no value can overflow whatever the unit; ranges are the caller's.
public enum DurationText {
    /// The value of `text`, or nil when it is not of this grammar.
    public static func parse(_ text: some StringProtocol) -> Duration? {
        var rest = Substring(text)
        let scale: Int64  // milliseconds per unit
        if rest.hasSuffix("ms") {
            rest = rest.dropLast(2); scale = 1
        } else if rest.hasSuffix("s") {
            rest = rest.dropLast(); scale = 1000
        } else if rest.hasSuffix("m") {
            rest = rest.dropLast(); scale = 60_000
        } else if rest.hasSuffix("h") {
            rest = rest.dropLast(); scale = 3_600_000
        } else if rest.hasSuffix("d") {
            rest = rest.dropLast(); scale = 86_400_000
        } else {
            return nil
        }
        let parts = rest.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        func digits(_ part: Substring, _ range: ClosedRange<Int>) -> Bool {
            range.contains(part.utf8.count) && part.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
        }
        guard let whole = parts.first, digits(whole, 1...7), let integer = Int64(whole) else { return nil }
        var thousandths: Int64 = 0
        if parts.count == 2 {
            guard digits(parts[1], 1...3), let fraction = Int64(parts[1]) else { return nil }
            thousandths = fraction * [100, 10, 1][parts[1].utf8.count - 1]
        }
        // (integer × 1 000 + fraction) × 86 400 000 at most: below 2^63 (10^10 × 8.64 × 10^7 < 9.2 × 10^18). Milliseconds are whole: `1.5ms` is refused.
        let microseconds = (integer * 1000 + thousandths) * scale
        guard microseconds % 1000 == 0 || scale > 1 else { return nil }
        return .microseconds(microseconds)
    }
}
