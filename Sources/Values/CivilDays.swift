/// Days since 1970-01-01 and proleptic Gregorian dates, both ways (Howard Hinnant's algorithms): what PostgreSQL
/// counts in, and what the API writes. Foundation's calendars count years before 1582 in the Julian calendar.
public enum CivilDays {
    /// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    public static func days(fromYear year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// Days since 1970-01-01 to a proleptic Gregorian date (the inverse of `days(fromYear:month:day:)`); the API's
    /// timestamps use it too. Valid for the years 1…9999 callers have checked.
    public static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        // 0000-03-01 … 9999-12-31, every date the API writes: unsigned 32-bit arithmetic, with no negative-era
        // branch and no overflow checks (every intermediate stays below 2^23). 100 instructions per date in
        // signed 64 bits (callgrind, `GET /v1/logs` converts 60).
        guard days >= -719_468 && days <= 2_932_896 else { return civilReference(fromDays: days) }
        let z = UInt32(truncatingIfNeeded: days &+ 719_468)
        let era = z / 146_097
        let dayOfEra = z &- era &* 146_097
        let yearOfEra = (dayOfEra &- dayOfEra / 1460 &+ dayOfEra / 36_524 &- dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra &- (365 &* yearOfEra &+ yearOfEra / 4 &- yearOfEra / 100)
        let mp = (5 &* dayOfYear &+ 2) / 153
        let day = dayOfYear &- (153 &* mp &+ 2) / 5 &+ 1
        let month = mp < 10 ? mp &+ 3 : mp &- 9
        return (Int64(yearOfEra &+ era &* 400 &+ (month <= 2 ? 1 : 0)), Int64(month), Int64(day))
    }

    /// The same in signed 64 bits, for any era: what `civil` does outside its fast range, and its reference in tests.
    static func civilReference(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
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
