import Foundation

/// Conversion between `Date` and PostgreSQL's ISO text format for timestamptz, timestamp and date.
///
/// Done by hand (days-from-civil) rather than with a `DateFormatter`: it is exact to the microsecond,
/// independent of the process locale, and reads any UTC offset, so a session `TimeZone` other than UTC
/// still decodes correctly. Foundation's `Date.ISO8601FormatStyle` cannot replace it: PostgreSQL writes `+00`
/// offsets and a space before the time, and Foundation counts years before 1582 in the Julian calendar
/// (measured: `0001-01-01T00:00:00Z` is 2 days off PostgreSQL's proleptic Gregorian value).
package enum PostgresDate {
    /// - Throws: `PostgresClientError.invalidParameter` for a date outside years 1…9999 (or not finite).
    static func format(_ date: Date) throws -> String {
        guard let micros = date.microsecondsSince1970 else {
            throw PostgresClientError(.invalidParameter, "a date outside the years 1 to 9999 cannot be stored")
        }
        let secondsOfDay = 86_400 * Int64(1_000_000)
        var days = micros / secondsOfDay
        var rest = micros % secondsOfDay
        if rest < 0 { rest += secondsOfDay; days -= 1 }
        let (year, month, day) = civil(fromDays: days)
        let second = rest / 1_000_000
        let fraction = rest % 1_000_000
        var text = "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2)) "
        text += "\(pad(second / 3600, 2)):\(pad(second / 60 % 60, 2)):\(pad(second % 60, 2))"
        if fraction != 0 { text += "." + pad(fraction, 6) }
        return text + "+00"
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
        var micros = days(fromYear: year, month: month, day: day) * 86_400 * 1_000_000
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

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    private static func days(fromYear year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// Days since 1970-01-01 to a proleptic Gregorian date (the inverse of `days(fromYear:month:day:)`); the API's
    /// timestamps use it too. Valid for the years 1…9999 callers have checked.
    package static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}

extension Date {
    /// Microseconds from 0001-01-01T00:00:00Z through 9999-12-31T23:59:59.999999Z: what this library encodes
    /// and decodes. Every conversion checks against it, so no input can trap a conversion.
    public static let representableMicroseconds: ClosedRange<Int64> = -62_135_596_800_000_000 ... 253_402_300_799_999_999

    /// Microseconds since 1970 rounded to PostgreSQL's resolution, or nil outside years 1…9999 (or for NaN).
    public var microsecondsSince1970: Int64? {
        let micros = (timeIntervalSince1970 * 1_000_000).rounded()
        // Both bounds are exact in a Double (multiples of 2^8), so these comparisons are exact too; NaN fails them.
        guard micros >= -62_135_596_800_000_000.0, micros < 253_402_300_800_000_000.0 else { return nil }
        return Int64(micros)
    }

    /// The date `micros` microseconds after 1970, or nil outside years 1…9999.
    public init?(microsecondsSince1970 micros: Int64) {
        guard Self.representableMicroseconds.contains(micros) else { return nil }
        self.init(timeIntervalSince1970: Double(micros) / 1_000_000)
    }
}
