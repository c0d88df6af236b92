import Foundation

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
    /// The last day number a writer turned into a date, and that date: the timestamps of one body mostly fall on
    /// a few days, and `CivilDays.civil` was 60 instructions a timestamp (`GET /v1/logs` writes 60).
    public struct RecentDay {
        var days = Int64.min
        var date: (year: Int64, month: Int64, day: Int64) = (0, 0, 0)

        public init() {}

        mutating func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
            if days != self.days {
                date = CivilDays.civil(fromDays: days)
                self.days = days
            }
            return date
        }
    }

    private static func fields(_ date: Date) throws -> Fields {
        var recent = RecentDay()
        return try fields(date, recent: &recent)
    }

    private static func fields(_ date: Date, recent: inout RecentDay) throws -> Fields {
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
        let (year, month, day) = recent.civil(fromDays: days)
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

    /// `write(_:into:)` for a writer of many timestamps, which keeps `recent` from one to the next.
    public static func write(_ date: Date, into buffer: UnsafeMutableBufferPointer<UInt8>, recent: inout RecentDay) throws -> Int {
        try fields(date, recent: &recent).write(into: buffer)
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

    /// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; the zone is required. A date that does not exist (31 February;
    /// a 60th second that would roll into the next day) is refused.
    ///
    /// Read on the string's bytes with a cursor, the day number from `CivilDays`: an Array, a Character per
    /// separator and `timegm` cost 6.4 k instructions per timestamp (`POST /v1/logs` reads one).
    public static func parse(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { parse(utf8: $0) }
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        mutating func number(_ count: Int) -> Int? {
            guard count <= bytes.count - index else { return nil }
            var value = 0
            for _ in 0..<count {
                let byte = bytes[index]
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int(byte &- 48)
                index += 1
            }
            return value
        }

        mutating func expect(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }
    }

    private static func parse(utf8 bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        guard bytes.count >= 20, bytes.count <= 40 else { return nil }
        var reader = Reader(bytes: bytes)
        guard let year = reader.number(4), reader.expect(UInt8(ascii: "-")), let month = reader.number(2),
              reader.expect(UInt8(ascii: "-")), let day = reader.number(2),
              reader.expect(UInt8(ascii: "T")) || reader.expect(UInt8(ascii: "t")), let hour = reader.number(2),
              reader.expect(UInt8(ascii: ":")), let minute = reader.number(2), reader.expect(UInt8(ascii: ":")),
              let second = reader.number(2), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        // The fraction as whole nanoseconds (9 digits at most): summed as a Double it rounded .99999999 up.
        var nanoseconds = 0
        if reader.expect(UInt8(ascii: ".")) {
            let start = reader.index
            while reader.index < bytes.count, bytes[reader.index] >= 48, bytes[reader.index] <= 57, reader.index - start < 9 {
                nanoseconds = nanoseconds * 10 + Int(bytes[reader.index] &- 48)
                reader.index += 1
            }
            guard reader.index > start else { return nil }
            for _ in 0..<(9 - (reader.index - start)) { nanoseconds *= 10 }
        }
        var offset = 0
        if reader.expect(UInt8(ascii: "Z")) || reader.expect(UInt8(ascii: "z")) {
        } else if reader.index < bytes.count, bytes[reader.index] == UInt8(ascii: "+") || bytes[reader.index] == UInt8(ascii: "-") {
            let sign = bytes[reader.index] == UInt8(ascii: "+") ? 1 : -1
            reader.index += 1
            guard let hours = reader.number(2), reader.expect(UInt8(ascii: ":")), let minutes = reader.number(2), hours < 24, minutes < 60
            else { return nil }
            offset = sign * (hours * 3600 + minutes * 60)
        } else {
            return nil
        }
        guard reader.index == bytes.count else { return nil }
        // Every part is a few digits: nothing here can overflow.
        let seconds = CivilDays.days(fromYear: Int64(year), month: Int64(month), day: Int64(day)) * 86_400
            + Int64(hour * 3600 + minute * 60 + second)
        // The day the seconds fall on must be the one written: 31 February is 3 March, 23:59:60 the next day.
        let dayNumber = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let (_, dayMonth, dayOfMonth) = CivilDays.civil(fromDays: dayNumber)
        guard dayMonth == Int64(month), dayOfMonth == Int64(day) else { return nil }
        // Never past the second written: a Double near 10^9 s (or 2.5 × 10^11 s in year 9999) has no room for the
        // last nanoseconds of a second, and whole + fraction rounded to the next second, even the next day or year
        // (2000-02-29T23:59:59.99999999Z was read as 1 March; 1969-12-31T23:59:59.9999999Z as 1970). The value is
        // the second written plus as much of the fraction as a Double holds below the next one.
        let whole = Double(seconds - Int64(offset))
        return Date(timeIntervalSince1970: min(whole + Double(nanoseconds) / 1e9, (whole + 1).nextDown))
    }
}
