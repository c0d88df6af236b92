import Foundation
@testable import PoopyPalsHTTP
import Testing
import Values

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

    /// Every time the API reads, it writes back the same: also before 1582, where Foundation's formatter
    /// switches to the Julian calendar (PostgreSQL and our parser use the proleptic Gregorian one).
    @Test(arguments: ["0001-01-01T00:00:00Z", "1000-03-01T12:34:56Z", "1582-10-10T00:00:00Z", "1582-10-15T00:00:00Z",
                      "1600-02-29T23:59:59Z", "1900-03-01T00:00:00Z", "1969-12-31T23:59:59Z", "2000-02-29T00:00:00Z",
                      "2026-11-23T10:00:00Z", "9999-12-31T23:59:59Z"])
    func whatIsReadIsWrittenBackUnchanged(_ text: String) throws {
        let date = try #require(Timestamp.parse(text))
        #expect(try Timestamp.format(date) == text)
    }

    /// The formatter agrees with Foundation's wherever Foundation's calendar is the Gregorian one.
    @Test func formatAgreesWithFoundationAfter1582() throws {
        let style = Date.ISO8601FormatStyle()
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5000 {
            let seconds = Double(Int64.random(in: -12_212_553_600...253_402_300_799, using: &generator))  // 1583…9999
            let date = Date(timeIntervalSince1970: seconds)
            #expect(try Timestamp.format(date) == style.format(date))
        }
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
