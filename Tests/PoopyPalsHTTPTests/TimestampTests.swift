import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import PoopyPalsHTTP
import Testing
import TestSupport
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

    /// The parser as it was, with `timegm` and a Character per separator: the reference the byte reader is
    /// compared with.
    static func reference(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.count <= 40 else { return nil }
        var index = 0
        func number(_ count: Int) -> Int? {
            guard index + count <= bytes.count else { return nil }
            var value = 0
            for _ in 0..<count {
                guard (48...57).contains(bytes[index]) else { return nil }
                value = value * 10 + Int(bytes[index] - 48)
                index += 1
            }
            return value
        }
        func expect(_ character: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == character else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect(45), let month = number(2), expect(45), let day = number(2),
              expect(84) || expect(116), let hour = number(2), expect(58), let minute = number(2), expect(58),
              let second = number(2), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var fractionDigits = ""
        if expect(46) {
            let start = index
            while index < bytes.count, (48...57).contains(bytes[index]), index - start < 9 {
                fractionDigits.append(Character(UnicodeScalar(bytes[index])))
                index += 1
            }
            guard index > start else { return nil }
        }
        let nanoseconds = Int(fractionDigits.padding(toLength: 9, withPad: "0", startingAt: 0)) ?? 0
        var offset = 0
        if expect(90) || expect(122) {
        } else if index < bytes.count, bytes[index] == 43 || bytes[index] == 45 {
            let sign = bytes[index] == 43 ? 1 : -1
            index += 1
            guard let hours = number(2), expect(58), let minutes = number(2), hours < 24, minutes < 60 else { return nil }
            offset = sign * (hours * 3600 + minutes * 60)
        } else {
            return nil
        }
        guard index == bytes.count else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        guard parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        // As documented: the second written, and of the fraction what a Double holds below the next second.
        let whole = Double(seconds - offset)
        return Date(timeIntervalSince1970: min(whole + Double(nanoseconds) / 1e9, (whole + 1).nextDown))
    }

    /// 60 000 generated texts, most of them nearly valid (every field at and past its bounds, leap days, second
    /// 60 at the end of a day, month and year, fractions of 0 to 12 digits, zones and junk): read as the
    /// reference reads them, to the same `Date`.
    @Test func theByteReaderReadsAsTheReferenceDoes() {
        var generator = SystemRandomNumberGenerator()
        func pick(_ options: [String]) -> String { options.randomElement(using: &generator) ?? "" }
        func digits(_ range: ClosedRange<Int>, width: Int) -> String {
            let value = Int.random(in: range, using: &generator)
            return String(repeating: "0", count: max(0, width - String(value).count)) + String(value)
        }
        var texts = ["2024-02-29T23:59:60Z", "2023-02-29T00:00:00Z", "2026-12-31T23:59:60Z", "2026-06-30T23:59:60+01:00",
                     "0000-01-01T00:00:00Z", "0000-02-29T12:00:00Z", "9999-12-31T23:59:60Z", "1900-02-29T00:00:00Z",
                     "2026-11-21T10:00:00.123456789Z", "2026-11-21T10:00:00.1234567891Z", "2026-11-21T10:00:00.Z"]
        for _ in 0..<60_000 {
            let year = pick([digits(0...9999, width: 4), "1969", "1970", "2000", "2024", "0000", "9999", "1582", "12a4"])
            let month = pick([digits(0...13, width: 2), "02", "12", "1"])
            let day = pick([digits(0...32, width: 2), "28", "29", "30", "31"])
            let hour = pick([digits(0...24, width: 2), "23"]), minute = pick([digits(0...60, width: 2), "59"])
            let second = pick([digits(0...61, width: 2), "59", "60"])
            let fraction = pick(["", "", ".", "." + digits(0...9, width: 1), "." + digits(0...999_999, width: 6),
                                 "." + digits(0...999_999_999, width: 9) + digits(0...999, width: 3)])
            let zone = pick(["Z", "Z", "z", "+" + digits(0...24, width: 2) + ":" + digits(0...60, width: 2),
                             "-" + digits(0...24, width: 2) + ":" + digits(0...60, width: 2), "", "+05", "Zjunk", "+05:30x"])
            var text = year + pick(["-", "-", "-", "/"]) + month + "-" + day + pick(["T", "T", "t", " "]) + hour + ":" + minute
                + pick([":", ":", ":", "."]) + second + fraction + zone
            if Int.random(in: 0..<20, using: &generator) == 0 { text = String(text.dropLast(Int.random(in: 1...5, using: &generator))) }
            texts.append(text)
        }
        var accepted = 0
        for text in texts {
            let expected = Self.reference(text)
            #expect(Timestamp.parse(text) == expected, "\(text)")
            if expected != nil { accepted += 1 }
        }
        print("timestamps: \(accepted) of \(texts.count) accepted")
        #expect(accepted > 2_000 && accepted < texts.count - 2_000, "\(accepted) of \(texts.count) accepted")
    }

    /// A fraction is never rounded up into the next second (issue 42, item 9): summed as a Double, .99999999 made
    /// 2000-02-29T23:59:59 into 1 March, and 1969-12-31T23:59:59.9999999 into 1970, past the "not before 1970" check.
    @Test func aFractionNeverCarriesIntoTheNextSecond() throws {
        let cases: [(String, Int64)] = [("2000-02-29T23:59:59.99999999Z", 951_868_799), ("2000-02-29T23:59:59.999999999Z", 951_868_799),
                                        ("9999-12-31T23:59:59.999999999Z", 253_402_300_799), ("1969-12-31T23:59:59.9999999Z", -1),
                                        ("2026-11-21T10:00:00.000000001Z", 1_795_255_200), ("0001-01-01T00:00:00.9999999Z", -62_135_596_800)]
        for (text, second) in cases {
            let date = try #require(Timestamp.parse(text), "\(text)")
            #expect(Int64(date.timeIntervalSince1970.rounded(.down)) == second, "\(text): \(date.timeIntervalSince1970)")
        }
    }

    @Test func aLogJustBeforeMidnightKeepsItsDayAndOneJustBefore1970IsRefused() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let kept = try await api.send("POST", "/v1/logs", device: device,
                                          json: #"{"occurredAt":"2000-02-29T23:59:59.99999999Z","bristolType":4}"#)
            #expect(kept.status == 201)
            #expect(kept.json?["occurredAt"] as? String == "2000-02-29T23:59:59Z")
            let early = try await api.send("POST", "/v1/logs", device: device,
                                           json: #"{"occurredAt":"1969-12-31T23:59:59.9999999Z","bristolType":4}"#)
            #expect(early.status == 400)
            #expect(early.errorCode == "invalid_field")
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
