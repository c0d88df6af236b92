import Foundation
@testable import PoopyPalsHTTP
import Testing

@Suite("API timestamps")
struct TimestampTests {
    /// Out: whole seconds, rounded down, always the same shape; parsed back, the same second.
    @Test func formatWritesWholeSecondsThatParseBack() throws {
        for seconds in [0.0, 1_790_000_000.123456, 1_790_000_000.5, 1_790_000_000, 951_782_400.999999, -0.5] {
            let text = try Timestamp.format(Date(timeIntervalSince1970: seconds))
            #expect(text.count == 20 && text.hasSuffix("Z") && !text.contains("."), "\(text)")
            let parsed = try #require(Timestamp.parse(text), "\(text)")
            #expect(parsed.timeIntervalSince1970 == seconds.rounded(.down), "\(text)")
        }
        #expect(try Timestamp.format(Date(timeIntervalSince1970: 1_790_000_000.5)) == "2026-09-21T14:13:20Z")
        #expect(try Timestamp.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00Z")
        #expect(try Timestamp.format(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59Z")
    }

    @Test func offsetsAndFractionsAreReadAndBadInputIsRefused() {
        #expect(Timestamp.parse("2026-11-21T10:00:00+05:30") == Timestamp.parse("2026-11-21T04:30:00Z"))
        #expect(Timestamp.parse("2026-11-21T00:00:00.25-01:00")?.timeIntervalSince1970 == 1_795_222_800.25)
        for bad in ["2026-11-21T10:00:00", "2026-11-21 10:00:00Z", "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z",
                    "2026-11-21T25:00:00Z", "2026-11-21T10:00:00.Z", "yesterday", "2026-11-21T10:00:00Zjunk"] {
            #expect(Timestamp.parse(bad) == nil, "\(bad)")
        }
    }
}
