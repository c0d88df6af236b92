import Values

/// PostgreSQL's `date` as a `CalendarDate` (the value type lives in `Values`, which every layer may use).
extension CalendarDate: PostgresEncodable, PostgresDecodable {
    public func postgresText() throws -> String? { description }

    public static func decode(postgresText text: String, type: PostgresType) throws -> CalendarDate {
        try requireType(type, .date)
        guard let date = CalendarDate(text) else { throw PostgresDecodingFailure("not a YYYY-MM-DD date") }
        return date
    }
}
