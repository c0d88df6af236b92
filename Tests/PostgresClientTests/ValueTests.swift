import Foundation
import PostgresClient
import Testing
import TestSupport

@Suite("Values travel intact")
struct ValueTests {
    /// A column is found by its exact name, in a narrow result (compared in libpq's bytes) and a wide one (a
    /// dictionary): a name that is the prefix of another, an empty name, a name that differs only in case, one
    /// that is not ASCII; a decoding error names its column; names and the command tag are read when asked.
    @Test func columnsAreFoundByTheirExactName() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                let narrow = try conn.query(#"SELECT 1 AS id, 2 AS id2, 3 AS "i", 4 AS "é", 5 AS "ID", 'x' AS t, 6 AS "Id ""q""""#)
                #expect(narrow.commandTag == "SELECT 1")
                #expect(narrow.columns.map(\.name) == ["id", "id2", "i", "é", "ID", "t", #"Id "q""#])
                let row = narrow[0]
                #expect(try [row.decode("id", as: Int.self), row.decode("id2"), row.decode("i"), row.decode("é"), row.decode("ID"),
                             row.decode(#"Id "q""#)] == [1, 2, 3, 4, 5, 6])
                #expect(throws: PostgresDecodingError.self) { try row.decode("", as: Int.self) }
                #expect(throws: PostgresDecodingError.self) { try row.decode("Id", as: Int.self) }
                let error = try #require(throws: PostgresDecodingError.self) { try row.decode("t", as: Int.self) }
                #expect(error.column == "t")

                let wide = try conn.query(PostgresQuery(unsafeSQL: "SELECT " + (0..<20).map { "\($0) AS c\($0)" }.joined(separator: ", ")))
                #expect(try (0..<20).map { try wide[0].decode("c\($0)", as: Int.self) } == Array(0..<20))
                #expect(throws: PostgresDecodingError.self) { try wide[0].decode("c20", as: Int.self) }
                #expect(wide.columns.count == 20)
            }
        }
    }

    @Test func everySupportedTypeRoundTripsIncludingNull() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript("""
                    CREATE TABLE sample (t text, i2 int2, i4 int4, i8 int8, b bool, d float8, n numeric,
                      u uuid, ts timestamptz, dt date, raw bytea)
                    """)
                let when = Date(timeIntervalSince1970: 1_790_000_000.123456)
                let id = UUID()
                let bytes = Data([0, 1, 2, 0xfe, 0xff, 0x5c, 0x78])
                try conn.execute("""
                    INSERT INTO sample VALUES (\("héllo 💩 \u{1F600}"), \(Int16.min), \(Int32.max), \(Int64.min),
                      \(true), \(-0.1), \(Decimal(string: "12345678901234567890.123456789")!), \(id), \(when),
                      \("2026-11-21"), \(bytes))
                    """)
                try conn.execute("""
                    INSERT INTO sample VALUES (\(String?.none), \(Int16?.none), \(Int32?.none), \(Int64?.none),
                      \(Bool?.none), \(Double?.none), \(Decimal?.none), \(UUID?.none), \(Date?.none), NULL, \(Data?.none))
                    """)
                let rows = try conn.query("SELECT * FROM sample ORDER BY t NULLS LAST")
                #expect(rows.count == 2)
                let row = rows[0]
                #expect(try row.decode("t", as: String.self) == "héllo 💩 \u{1F600}")
                #expect(try row.decode("i2", as: Int16.self) == .min)
                #expect(try row.decode("i4", as: Int32.self) == .max)
                #expect(try row.decode("i8", as: Int64.self) == .min)
                #expect(try row.decode("b", as: Bool.self) == true)
                #expect(try row.decode("d", as: Double.self) == -0.1)
                #expect(try row.decode("n", as: Decimal.self) == Decimal(string: "12345678901234567890.123456789")!)
                #expect(try row.decode("u", as: UUID.self) == id)
                #expect(try row.decode("ts", as: Date.self) == when)
                #expect(try row.decode("dt", as: Date.self) == Date(timeIntervalSince1970: 1_795_219_200))
                #expect(try row.decode("raw", as: Data.self) == bytes)
                let empty = rows[1]
                for column in ["t", "i2", "i4", "i8", "b", "d", "n", "u", "ts", "dt", "raw"] {
                    #expect(try empty.decode(column, as: String?.self) == nil)
                }
                #expect(try empty.decode("i8", as: Int64?.self) == nil)
                #expect(try empty.decode("ts", as: Date?.self) == nil)
            }
        }
    }

    @Test(arguments: [
        "'; DROP TABLE sample; --",
        "Robert'); DROP TABLE students;--",
        "$1 $2 \\x00 \\' \" E'\\n'",
        "$$ dollar $$ $tag$",
        "/* comment */ -- comment",
        "long: " + String(repeating: "ü", count: 12),
    ])
    func injectionLookingStringsAreStoredVerbatim(_ value: String) async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript("CREATE TABLE sample (t text)")
                try conn.execute("INSERT INTO sample (t) VALUES (\(value))")
                let rows = try conn.query("SELECT t, (SELECT count(*) FROM sample) AS n FROM sample WHERE t = \(value)")
                #expect(rows.count == 1)
                #expect(try rows[0].decode("t", as: String.self) == value)
                #expect(try rows[0].decode("n", as: Int.self) == 1)
            }
        }
    }

    @Test func aLongUnicodeValueIsNotTruncated() async throws {
        let value = String(repeating: "ü💩", count: 50_000)
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                let row = try conn.query("SELECT \(value)::text AS v, length(\(value)::text) AS n")[0]
                #expect(try row.decode("v", as: String.self) == value)
                #expect(try row.decode("n", as: Int.self) == 100_000)
            }
        }
    }

    @Test func nulByteIsRejectedBeforeSendingAndTheConnectionStaysUsable() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript("CREATE TABLE sample (t text)")
                let error = #expect(throws: PostgresClientError.self) {
                    try conn.execute("INSERT INTO sample (t) VALUES (\("before\u{0}after"))")
                }
                #expect(error?.kind == .invalidParameter)
                #expect(error?.message.contains("$1") == true)
                #expect(error?.message.contains("before") == false)
                #expect(try conn.query("SELECT count(*) FROM sample")[0].decode(0, as: Int.self) == 0)
                #expect(throws: PostgresClientError.self) { try conn.executeScript("SELECT '\u{0}'") }
            }
        }
    }

    @Test func decodingErrorsNameTheColumnAndTypeButNotTheValue() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                let row = try conn.query("SELECT 'secret-text'::text AS nickname, NULL::int AS missing, 70000 AS big, 1.5::numeric AS n")[0]
                let wrongType = #expect(throws: PostgresDecodingError.self) { try row.decode("nickname", as: UUID.self) }
                #expect(wrongType?.description.contains("nickname") == true)
                #expect(wrongType?.description.contains("UUID") == true)
                #expect(wrongType?.description.contains("secret-text") == false)
                let null = #expect(throws: PostgresDecodingError.self) { try row.decode("missing", as: Int.self) }
                #expect(null?.reason == "unexpected NULL")
                let overflow = #expect(throws: PostgresDecodingError.self) { try row.decode("big", as: Int16.self) }
                #expect(overflow?.description.contains("Int16") == true)
                #expect(throws: PostgresDecodingError.self) { try row.decode("n", as: Double.self) }
                #expect(throws: PostgresDecodingError.self) { try row.decode("nope", as: String.self) }
            }
        }
    }

    /// The driver asks libpq whether a value is NULL only when its length is 0: an empty value is still a value,
    /// in text and in binary results.
    @Test func emptyValuesAreNotNullAndNullsAreNotEmpty() async throws {
        try await TestDatabase.with { db in
            let rows = try await db.withConnection { conn -> [[String?]] in
                let sql: PostgresQuery = "SELECT ''::text AS empty, NULL::text AS absent, 'x'::text AS one, ''::bytea::text AS bytes"
                return try [conn.query(sql), conn.query(sql.withBinaryResults())].map { result in
                    try (0..<4).map { try result[0].decode($0, as: String?.self) }
                }
            }
            #expect(rows == [["", nil, "x", "\\x"], ["", nil, "x", "\\x"]])
        }
    }

    /// Errors for what a result does not have say what was asked: a column out of range by number, a row out of
    /// range by the column's name and type, a name that is not there by that name.
    @Test func outOfRangeColumnsRowsAndNamesAreErrorsSayingWhatWasAsked() async throws {
        try await TestDatabase.with { db in
            let errors = try await db.withConnection { conn -> [PostgresDecodingError?] in
                let result = try conn.query("SELECT 7::int4 AS seven")
                func caught(_ work: () throws -> Int) -> PostgresDecodingError? {
                    do { _ = try work(); return nil } catch { return error as? PostgresDecodingError }
                }
                return [caught { try result[0].decode(1) }, caught { try result[0].decode(-1) },
                        caught { try result[1].decode(0) }, caught { try result[0].decode("eight") },
                        caught { try result[0].decode("seven") }]
            }
            #expect(errors.count == 5)
            #expect(errors[0].map { [$0.column, $0.expected, $0.actualType, $0.reason] } == ["#1", "Int", "none", "no such column"])
            #expect(errors[1].map { [$0.column, $0.expected, $0.actualType, $0.reason] } == ["#-1", "Int", "none", "no such column"])
            #expect(errors[2].map { [$0.column, $0.expected, $0.actualType, $0.reason] } == ["seven", "Int", "int4", "no such row"])
            #expect(errors[3].map { [$0.column, $0.expected, $0.actualType, $0.reason] } == ["eight", "Int", "none", "no such column in the result"])
            #expect(errors[4] == nil)
        }
    }

    @Test func decimalThatWouldLosePrecisionIsRefusedNotRounded() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                let digits = "1234567890123456789012345678901234567890.12345"
                let row = try conn.query("SELECT \(digits)::numeric AS n")[0]
                #expect(throws: PostgresDecodingError.self) { try row.decode("n", as: Decimal.self) }
                #expect(try row.decode("n", as: String.self) == digits)
            }
        }
    }

    @Test func timestampsDecodeTheSameInAnySessionTimeZone() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                let instant = Date(timeIntervalSince1970: 1_700_000_000.5)
                for zone in ["UTC", "Asia/Kolkata", "America/St_Johns", "Pacific/Chatham"] {
                    try conn.executeScript("SET TimeZone = '\(zone)'")
                    let row = try conn.query("SELECT \(instant)::timestamptz AS ts, \(instant)::timestamptz::text AS shown")[0]
                    #expect(try row.decode("ts", as: Date.self) == instant, "zone \(zone)")
                }
            }
        }
    }
}
