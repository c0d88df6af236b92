import Foundation
@testable import PoopyPalsHTTP
import Testing

@Suite("API timestamps")
struct TimestampTests {
    @Test func formatAndParseRoundTripAtMicrosecondPrecision() throws {
        for seconds in [0.0, 1_790_000_000.123456, 1_790_000_000.5, 1_790_000_000, 951_782_400.000001] {
            let date = Date(timeIntervalSince1970: seconds)
            let text = try Timestamp.format(date)
            let parsed = try #require(Timestamp.parse(text), "\(text)")
            #expect(abs(parsed.timeIntervalSince1970 - seconds) < 0.000_001, "\(text)")
        }
        #expect(try Timestamp.format(Date(timeIntervalSince1970: 1_790_000_000.5)) == "2026-09-21T14:13:20.5Z")
        #expect(try Timestamp.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00Z")
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
