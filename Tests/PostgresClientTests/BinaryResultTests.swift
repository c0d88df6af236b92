import Foundation
import PostgresClient
import Testing
import TestSupport
import Values

/// `PostgresQuery.binaryResults`: the same values as the text format, at every edge the text codecs know, and the
/// same refusals (infinities, years outside 1…9999, a type with no binary decoder).
@Suite("Binary results")
struct BinaryResultTests {
    static let select = """
        SELECT t, v, i2, i4, i8, b, f8, f4, u, ts, tsz, dt FROM (VALUES
          ('héllo 💩'::text, 'v'::varchar, (-32768)::int2, 2147483647::int4, (-9223372036854775808)::int8, true, (-0.1)::float8,
           1.5::float4, '00112233-4455-6677-8899-aabbccddeeff'::uuid, '0001-01-01 00:00:00'::timestamp,
           '9999-12-31 23:59:59.999999+00'::timestamptz, '0001-01-01'::date),
          ('', '', 0::int2, 0::int4, 0::int8, false, 'NaN'::float8, '-Infinity'::float4, '00000000-0000-0000-0000-000000000000'::uuid,
           '1999-12-31 23:59:59.5'::timestamp, '2000-01-01 00:00:00.000001+00'::timestamptz, '9999-12-31'::date),
          (NULL, NULL, 32767::int2, (-2147483648)::int4, 9223372036854775807::int8, NULL, 1e308::float8, NULL, NULL,
           '1969-12-31 23:59:59.999999'::timestamp, '2026-11-25 10:00:00.123456+05:30'::timestamptz, '1970-01-01'::date)
        ) AS sample(t, v, i2, i4, i8, b, f8, f4, u, ts, tsz, dt)
        """

    struct Decoded: Equatable {
        let t: String?, v: String?, i2: Int16, i4: Int32, i8: Int64, b: Bool?, f8: String, f4: String?, u: UUID?
        let ts: Date, tsz: Date, dt: Date, day: CalendarDate, wide: Int64, narrow: Int

        init(_ row: Row) throws {
            t = try row.decode("t"); v = try row.decode("v")
            i2 = try row.decode("i2"); i4 = try row.decode("i4"); i8 = try row.decode("i8"); b = try row.decode("b")
            // Doubles compared by their bits' description: NaN != NaN.
            f8 = "\(try row.decode("f8", as: Double.self).bitPattern)"
            f4 = try row.decode("f4", as: Double?.self).map { "\($0.bitPattern)" }
            u = try row.decode("u"); ts = try row.decode("ts"); tsz = try row.decode("tsz"); dt = try row.decode("dt")
            day = try row.decode("dt"); wide = try row.decode("i2"); narrow = try row.decode("i4")
        }
    }

    /// `column(named:expectedAt:)`: the column where it is expected, elsewhere when it is not there (a longer name
    /// with the same start, another column at the place), and an error when it is nowhere.
    @Test func aColumnIsFoundWhereExpectedElsewhereOrNotAtAll() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                let result = try conn.query("SELECT 1 AS id, 2 AS notes_long, 3 AS notes, 4 AS version")
                #expect(try result.column(named: "id", expectedAt: 0) == 0)
                #expect(try result.column(named: "notes", expectedAt: 1) == 2)
                #expect(try result.column(named: "version", expectedAt: 3) == 3)
                #expect(try result.column(named: "version", expectedAt: 9) == 3)
                #expect(try result.column(named: "id", expectedAt: -1) == 0)
                #expect(throws: PostgresDecodingError.self) { try result.column(named: "note", expectedAt: 2) }
            }
        }
    }

    @Test func binaryResultsDecodeToTheSameValuesAsText() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                let text = try conn.query(PostgresQuery(unsafeSQL: Self.select)).map(Decoded.init)
                let binary = try conn.query(PostgresQuery(unsafeSQL: Self.select).withBinaryResults()).map(Decoded.init)
                #expect(text.count == 3)
                #expect(binary == text)
                #expect(binary.first?.tsz == Date(timeIntervalSince1970: 253_402_300_799.999999))
                #expect(binary.last?.day == CalendarDate(year: 1970, month: 1, day: 1))
            }
        }
    }

    @Test func binaryResultsRefuseWhatTextRefuses() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                for (sql, type) in [("SELECT 'infinity'::timestamptz AS x", "Date"), ("SELECT '-infinity'::timestamp AS x", "Date"),
                                    ("SELECT 'infinity'::date AS x", "Date"),
                                    // PostgreSQL's last date: its microseconds do not fit in 64 bits.
                                    ("SELECT '5874897-12-31'::date AS x", "Date"), ("SELECT '5874897-12-31'::date AS x", "CalendarDate"),
                                    ("SELECT '4713-01-01 BC'::date AS x", "Date"), ("SELECT '10000-01-01'::timestamptz AS x", "Date"),
                                    ("SELECT '4713-01-01 BC'::date AS x", "CalendarDate"), ("SELECT 40000::int4 AS x", "Int16"),
                                    ("SELECT 1.5::numeric AS x", "Double"), ("SELECT 7::int4 AS x", "String"),
                                    ("SELECT '\\x00'::bytea AS x", "Data"), ("SELECT 'a'::text AS x", "UUID")] {
                    for binary in [false, true] {
                        var query = PostgresQuery(unsafeSQL: sql)
                        query.binaryResults = binary
                        let row = try #require(try conn.query(query).first)
                        let error = #expect(throws: PostgresDecodingError.self, "\(sql) as \(type), binary: \(binary)") {
                            switch type {
                            case "Date": _ = try row.decode("x", as: Date.self)
                            case "CalendarDate": _ = try row.decode("x", as: CalendarDate.self)
                            case "Int16": _ = try row.decode("x", as: Int16.self)
                            case "Double": _ = try row.decode("x", as: Double.self)
                            case "String": if binary { _ = try row.decode("x", as: String.self) } else { _ = try row.decode("x", as: Bool.self) }
                            case "Data": if binary { _ = try row.decode("x", as: Data.self) } else { _ = try row.decode("x", as: UUID.self) }
                            default: _ = try row.decode("x", as: UUID.self)
                            }
                        }
                        #expect(error.map { !"\($0)".contains("\\x00") && !"\($0)".contains("40000") } ?? false)
                    }
                }
            }
        }
    }
}
