import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Timestamps out: RFC 3339 in UTC to the whole second, always (`2026-11-23T10:00:00Z`), the one form that
/// every client decodes (swift-openapi-generator's default transcoder, `JSONDecoder.iso8601`). Stored log
/// times are whole seconds (sql/0011); other times (createdAt, updatedAt) are rounded down. In: any RFC 3339
/// time with a zone, fractions accepted.
///
/// Out: our own formatter (days to a proleptic Gregorian date with `CivilDays.civil`, Hinnant's algorithm): Foundation's
/// `Date.ISO8601FormatStyle` cost 5 % of the server's CPU listing 20 logs, and it writes dates before 1582 in
/// the Julian calendar, so a log at 1000-03-01 read back as 1000-02-24. In: our own parser, because Foundation's
/// (measured, Swift 6.3.1 on Linux) takes `2026-02-31T10:00:00Z` as 3 March and `24:00:00` as the next day,
/// refuses RFC 3339's lower-case `t`/`z`, and counts years before 1582 in the Julian calendar too. A time that
/// does not exist is a 400 here.
public enum Timestamp {
    private static func fields(_ date: Date) throws -> Fields {
        guard let micros = date.microsecondsSince1970 else {
            throw EncodingError.invalidValue(date, .init(codingPath: [], debugDescription: "a date outside the years 1 to 9999"))
        }
        // Whole seconds, rounded down.
        var seconds = micros / 1_000_000
        if micros % 1_000_000 < 0 { seconds -= 1 }
        var days = seconds / 86_400
        var time = seconds % 86_400
        if time < 0 {
            time += 86_400
            days -= 1
        }
        let (year, month, day) = CivilDays.civil(fromDays: days)
        return Fields(year: year, month: month, day: day, time: time)
    }

    /// The 20 bytes of `format(_:)`, appended to `bytes` without an intermediate string: written on the stack,
    /// then copied in once.
    public static func append(_ date: Date, to bytes: inout [UInt8]) throws {
        let fields = try fields(date)
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { buffer in
            let count = fields.write(into: buffer)
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// Writes `format(_:)`'s 20 bytes into `buffer`; answers the bytes written, 0 when the buffer is smaller.
    /// - Throws: `EncodingError` for a date outside years 1…9999 (never produced by the database).
    public static func write(_ date: Date, into buffer: UnsafeMutableBufferPointer<UInt8>) throws -> Int {
        try fields(date).write(into: buffer)
    }

    /// - Throws: `EncodingError` for a date outside years 1…9999 (never produced by the database).
    public static func format(_ date: Date) throws -> String {
        let fields = try fields(date)
        return String(unsafeUninitializedCapacity: 20) { fields.write(into: $0) }
    }

    /// "00", "01" … "99": a two-digit field is one lookup. A `StaticString` is a constant in the binary, read
    /// through a pointer: no lazy-initialisation check and no bounds check per digit, as a global array has.
    public static let digitPairs: StaticString = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"

    private struct Fields {
        let year: Int64, month: Int64, day: Int64, time: Int64

        /// Needs 20 bytes in `buffer`. Two-digit fields from `digitPairs`, in 32-bit arithmetic: 211 instructions
        /// per timestamp with a division and a remainder per digit in 64 bits, 70 this way (callgrind, `GET /v1/logs`
        /// writes 60).
        @discardableResult
        func write(into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
            // Every index into the table below is then at most 99 (`fields` refuses years outside 1…9999;
            // `CivilDays.civil` gives months 1…12 and days 1…31).
            guard buffer.count >= 20, let out = buffer.baseAddress, (1...9999).contains(year), (1...12).contains(month),
                  (1...31).contains(day), (0..<86_400).contains(time) else { return 0 }
            let pairs = Timestamp.digitPairs.utf8Start
            @inline(__always) func two(_ value: UInt32, at offset: Int) {
                let index = Int(truncatingIfNeeded: value &* 2)
                out[offset] = pairs[index]
                out[offset &+ 1] = pairs[index &+ 1]
            }
            let year = UInt32(truncatingIfNeeded: year), time = UInt32(truncatingIfNeeded: time)
            two(year / 100, at: 0)
            two(year % 100, at: 2)
            out[4] = UInt8(ascii: "-")
            two(UInt32(truncatingIfNeeded: month), at: 5)
            out[7] = UInt8(ascii: "-")
            two(UInt32(truncatingIfNeeded: day), at: 8)
            out[10] = UInt8(ascii: "T")
            two(time / 3600, at: 11)
            out[13] = UInt8(ascii: ":")
            two(time / 60 % 60, at: 14)
            out[16] = UInt8(ascii: ":")
            two(time % 60, at: 17)
            out[19] = UInt8(ascii: "Z")
            return 20
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; the zone is required.
    public static func parse(_ text: String) -> Date? {
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
        func expect(_ character: Character) -> Bool {
            guard index < bytes.count, bytes[index] == character.asciiValue! else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2),
              expect("T") || expect("t"), let hour = number(2), expect(":"), let minute = number(2), expect(":"),
              let second = number(2), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var fraction = 0.0
        if expect(".") {
            var scale = 0.1
            let start = index
            while index < bytes.count, (48...57).contains(bytes[index]), index - start < 9 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        var offset = 0
        if expect("Z") || expect("z") {
        } else if index < bytes.count, bytes[index] == 43 || bytes[index] == 45 {
            let sign = bytes[index] == 43 ? 1 : -1
            index += 1
            guard let hours = number(2), expect(":"), let minutes = number(2), hours < 24, minutes < 60 else { return nil }
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
        // timegm normalises 31 February into March; refuse dates that do not exist.
        guard parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        return Date(timeIntervalSince1970: Double(seconds - offset) + fraction)
    }
}
