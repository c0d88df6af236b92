import Values

/// PostgreSQL's `date` as a `CalendarDate` (the value type lives in `Values`, which every layer may use).
extension CalendarDate: PostgresEncodable, PostgresDecodable {
    public func postgresText() throws -> String? { description }

    public static func decode(postgresText text: String, type: PostgresType) throws -> CalendarDate {
        try requireType(type, .date)
        guard let date = CalendarDate(text) else { throw PostgresDecodingFailure("not a YYYY-MM-DD date") }
        return date
    }

    /// Days since 2000-01-01, big-endian; years outside 1…9999 and the infinities are refused.
    public static func decode(postgresBinary bytes: UnsafeBufferPointer<UInt8>, type: PostgresType) throws -> CalendarDate {
        try requireType(type, .date)
        guard bytes.count == 4 else { throw PostgresDecodingFailure("not a binary date") }
        let raw = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let days = Int64(Int32(bitPattern: raw)) + PostgresDate.daysFrom1970To2000
        // 0001-01-01 and 9999-12-31, in days since 1970.
        guard (-719_162 ... 2_932_896).contains(days) else { throw PostgresDecodingFailure("a date outside the years 1 to 9999") }
        let (year, month, day) = CivilDays.civil(fromDays: days)
        guard let date = CalendarDate(year: Int(year), month: Int(month), day: Int(day)) else {
            throw PostgresDecodingFailure("not a date")
        }
        return date
    }
}
