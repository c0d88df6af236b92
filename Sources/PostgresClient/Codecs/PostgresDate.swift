import Foundation
import Values

/// Conversion between `Date` and PostgreSQL's ISO text format for timestamptz, timestamp and date.
///
/// Done by hand (days-from-civil) rather than with a `DateFormatter`: it is exact to the microsecond,
/// independent of the process locale, and reads any UTC offset, so a session `TimeZone` other than UTC
/// still decodes correctly. Foundation's `Date.ISO8601FormatStyle` cannot replace it: PostgreSQL writes `+00`
/// offsets and a space before the time, and Foundation counts years before 1582 in the Julian calendar
/// (measured: `0001-01-01T00:00:00Z` is 2 days off PostgreSQL's proleptic Gregorian value).
package enum PostgresDate {
    /// 1970-01-01 to 2000-01-01, PostgreSQL's epoch for binary dates and timestamps.
    static let daysFrom1970To2000: Int64 = 10_957

    /// - Throws: `PostgresClientError.invalidParameter` for a date outside years 1…9999 (or not finite).
    static func format(_ date: Date) throws -> String {
        guard let micros = date.microsecondsSince1970 else {
            throw PostgresClientError(.invalidParameter, "a date outside the years 1 to 9999 cannot be stored")
        }
        let secondsOfDay = 86_400 * Int64(1_000_000)
        var days = micros / secondsOfDay
        var rest = micros % secondsOfDay
        if rest < 0 { rest += secondsOfDay; days -= 1 }
        let (year, month, day) = CivilDays.civil(fromDays: days)
        let second = rest / 1_000_000
        let fraction = rest % 1_000_000
        // Every index into the digit table below is then at most 99.
        guard (1...9999).contains(year), (1...12).contains(month), (1...31).contains(day) else {
            throw PostgresClientError(.invalidParameter, "a date outside the years 1 to 9999 cannot be stored")
        }
        // `YYYY-MM-DD HH:MM:SS[.ffffff]+00`, at most 29 bytes, written in place two digits at a time: built from
        // padded strings and interpolation it was 16 string appends per timestamp parameter (callgrind of
        // `POST /v1/logs`).
        return String(unsafeUninitializedCapacity: 29) { buffer in
            guard buffer.count >= 29, let out = buffer.baseAddress else { return 0 }
            let pairs = Timestamp.digitPairs.utf8Start
            var at = 0
            func two(_ value: Int64) {
                let index = Int(truncatingIfNeeded: value) &* 2
                out[at] = pairs[index]
                out[at &+ 1] = pairs[index &+ 1]
                at &+= 2
            }
            func byte(_ value: UInt8) {
                out[at] = value
                at &+= 1
            }
            two(year / 100); two(year % 100); byte(UInt8(ascii: "-")); two(month); byte(UInt8(ascii: "-")); two(day)
            byte(UInt8(ascii: " "))
            two(second / 3600); byte(UInt8(ascii: ":")); two(second / 60 % 60); byte(UInt8(ascii: ":")); two(second % 60)
            if fraction != 0 {
                byte(UInt8(ascii: "."))
                two(fraction / 10_000); two(fraction / 100 % 100); two(fraction % 100)
            }
            byte(UInt8(ascii: "+")); byte(UInt8(ascii: "0")); byte(UInt8(ascii: "0"))
            return at
        }
    }

    /// Parses `YYYY-MM-DD[ HH:MM:SS[.ffffff]][±HH[:MM[:SS]]]`; a value without offset is taken as UTC.
    static func parse(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { parse(utf8: $0) }
    }

    /// `parse(_:)` on UTF-8 bytes, such as libpq's buffer for a value: no String made on the way.
    static func parse(utf8 bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        var index = 0
        func number(_ digits: Int) -> Int64? {
            guard index + digits <= bytes.count else { return nil }
            var value: Int64 = 0
            for _ in 0..<digits {
                let byte = bytes[index]
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
                index += 1
            }
            return value
        }
        func expect(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }
        // PostgreSQL prints years past 9999 with more digits.
        var yearDigits = 0
        while index + yearDigits < bytes.count, bytes[index + yearDigits] >= 48, bytes[index + yearDigits] <= 57 { yearDigits += 1 }
        // Years 1…9999 only: their microseconds fit in Int64 with room to spare, so nothing below can overflow.
        guard yearDigits == 4, let year = number(yearDigits), year >= 1, expect(UInt8(ascii: "-")), let month = number(2),
              expect(UInt8(ascii: "-")), let day = number(2),
              (1...12).contains(month), (1...31).contains(day) else { return nil }
        var micros = CivilDays.days(fromYear: year, month: month, day: day) * 86_400 * 1_000_000
        if index < bytes.count, bytes[index] == UInt8(ascii: " ") || bytes[index] == UInt8(ascii: "T") {
            index += 1
            guard let hour = number(2), expect(UInt8(ascii: ":")), let minute = number(2),
                  expect(UInt8(ascii: ":")), let second = number(2),
                  hour < 24, minute < 60, second < 61 else { return nil }
            micros += ((hour * 60 + minute) * 60 + second) * 1_000_000
            if expect(UInt8(ascii: ".")) {
                var fraction: Int64 = 0
                var digits = 0
                while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                    if digits < 6 { fraction = fraction * 10 + Int64(bytes[index] - 48); digits += 1 }
                    index += 1
                }
                guard digits > 0 else { return nil }
                for _ in digits..<6 { fraction *= 10 }
                micros += fraction
            }
        }
        if index < bytes.count {
            let sign: Int64
            switch bytes[index] {
            case UInt8(ascii: "+"): sign = 1
            case UInt8(ascii: "-"): sign = -1
            case UInt8(ascii: "Z"): sign = 0
            default: return nil
            }
            index += 1
            if sign != 0 {
                guard let hours = number(2), hours < 16 else { return nil }
                var offset = hours * 3600
                if expect(UInt8(ascii: ":")) {
                    guard let minutes = number(2), minutes < 60 else { return nil }
                    offset += minutes * 60
                    if expect(UInt8(ascii: ":")) {
                        guard let seconds = number(2), seconds < 60 else { return nil }
                        offset += seconds
                    }
                }
                micros -= sign * offset * 1_000_000
            }
        }
        guard index == bytes.count, Date.representableMicroseconds.contains(micros) else { return nil }
        return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
    }
}
