import Foundation
@testable import PostgresClient
import Testing
import Values

@Suite("No database needed")
struct UnitTests {
    /// The C strings handed to libpq: NULL for nil, every value whole and NUL-terminated, also past the stack's
    /// share (a 100 000-byte value) and with no value at all.
    @Test func cStringArraysHoldEveryValueWhole() {
        let long = String(repeating: "ü💩x", count: 12_500)
        for strings: [String?] in [[], [nil], [""], [nil, "", "abc", "héllo 💩", long, nil, String(repeating: "a", count: 1023)],
                                   ["user", "5000", "2000", "60000", "00000000-0000-4000-8000-000000000001"]] {
            let read = withCStringArray(strings) { pointers in
                (0..<strings.count).map { index in pointers?[index].map { String(cString: $0) } }
            }
            #expect(read == strings)
        }
    }

    @Test func uuidTextAgreesWithFoundationBothWays() {
        for _ in 0..<2000 {
            let uuid = UUID()
            #expect(UUIDText.lowercase(uuid) == uuid.uuidString.lowercased())
            #expect(UUIDText.parse(uuid.uuidString) == uuid)
            #expect(UUIDText.parse(uuid.uuidString.lowercased()) == uuid)
        }
        #expect(UUIDText.lowercase(UUID(uuid: (0xff, 0, 0x0f, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xab, 0xcd)))
                == "ff000ff0-0102-0304-0506-0708090aabcd")
    }

    @Test(arguments: ["", "6f1c0a4e3b2d4c5e9f708a9b0c1d2e3f", "6f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3", "6f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3ff",
                      "6f1c0a4e-3b2d-4c5e-9f708-a9b0c1d2e3f", "6f1c0a4g-3b2d-4c5e-9f70-8a9b0c1d2e3f", "{f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3}",
                      "6f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3\u{e9}", "6f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2\u{1F4A9}", " 6f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3"])
    func uuidTextRefusesAnythingButTheHyphenatedForm(_ text: String) {
        // Stricter than Foundation on Linux, whose sscanf skips blanks: it reads the last one as …2e03.
        #expect(UUIDText.parse(text) == nil)
    }

    @Test(arguments: ["2000-+1-01", "2000-01-+1", "+200-01-01", "2000-1-01", "2000-01-1 ", " 2000-01-01", "2000-01-01T",
                      "2000-02-30", "0000-01-01", "2000-00-01", "2000-01-00", "2000-13-01", "2000\u{2212}01-01", "\u{0661}000-01-01"])
    func calendarDateRefusesAnythingButYYYYMMDD(_ text: String) {
        // `Int("+1")` is 1: the parser took "2000-+1-01" as January (dateOfBirth accepted more than openapi.yaml says).
        #expect(CalendarDate(text) == nil)
        #expect(CalendarDate("2000-02-29") == CalendarDate(year: 2000, month: 2, day: 29))
    }

    /// Integers, timestamps and UUIDs are read from libpq's bytes; what they return (or the failure they report)
    /// must be exactly what the String path gives.
    @Test func decodingFromBytesAgreesWithDecodingFromText() {
        func both<T: PostgresDecodable & Equatable>(_ text: String, _ type: PostgresType, as: T.Type) -> (String, String) {
            func describe(_ body: () throws -> T) -> String {
                do {
                    let value = try body()
                    // A Date's description stops at whole seconds: compare its exact offset too.
                    return "value \(value)" + ((value as? Date).map { " \($0.timeIntervalSince1970)" } ?? "")
                } catch let failure as PostgresDecodingFailure { return "failure \(failure.reason)" } catch { return "other \(error)" }
            }
            let viaText = describe { try T.decode(postgresText: text, type: type) }
            var copy = text
            let viaBytes = copy.withUTF8 { bytes in describe { try T.decode(postgresBytes: bytes, type: type) } }
            return (viaText, viaBytes)
        }
        let integers = ["0", "-0", "7", "-7", "007", "32767", "32768", "-32768", "-32769", "2147483647", "2147483648",
                        "-2147483648", "-2147483649", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                        "-9223372036854775809", "99999999999999999999999", "", "-", "+5", " 5", "5 ", "1e3", "12.0", "٣", "0x10"]
        for text in integers {
            for type in [PostgresType.int2, .int4, .int8, .numeric, .text] {
                var pair = both(text, type, as: Int16.self)
                #expect(pair.0 == pair.1, "Int16 \(text)")
                pair = both(text, type, as: Int32.self)
                #expect(pair.0 == pair.1, "Int32 \(text)")
                pair = both(text, type, as: Int64.self)
                #expect(pair.0 == pair.1, "Int64 \(text)")
                pair = both(text, type, as: Int.self)
                #expect(pair.0 == pair.1, "Int \(text)")
            }
        }
        #expect(both("9223372036854775807", .int8, as: Int64.self).1 == "value 9223372036854775807")
        #expect(both("-32768", .int2, as: Int16.self).1 == "value -32768")
        let dates = ["2026-11-24 01:02:03.456789+00", "2026-11-24 01:02:03+05:30", "0001-01-01 00:00:00+00", "9999-12-31 23:59:59.999999+00",
                     "2026-11-24", "infinity", "-infinity", "2026-13-01", "2026-11-24 25:00:00+00", "2026-11-24 01:02:03 junk", "", "20261124"]
        for text in dates {
            for type in [PostgresType.timestamptz, .timestamp, .date, .text] {
                let pair = both(text, type, as: Date.self)
                #expect(pair.0 == pair.1, "Date \(text)")
            }
        }
        for text in ["6f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3f", "6F1C0A4E-3B2D-4C5E-9F70-8A9B0C1D2E3F", "6f1c0a4e", ""] {
            for type in [PostgresType.uuid, .text] {
                let pair = both(text, type, as: UUID.self)
                #expect(pair.0 == pair.1, "UUID \(text)")
            }
        }
        let optional = both("42", .int4, as: Int?.self)
        #expect(optional.0 == optional.1)
    }

    @Test func interpolationBindsValuesAndOnlyUnescapedIsRaw() {
        let email = "x'); DROP TABLE users; --"
        let table = "users"
        let query: PostgresQuery = "SELECT * FROM \(unescaped: table) WHERE email = \(email) AND age > \(3)"
        #expect(query.sql == "SELECT * FROM users WHERE email = $1 AND age > $2")
        #expect(query.binds == [email, "3"])
        #expect(query.description.contains("DROP") == false)
    }

    /// The SQL text is built as bytes: every placeholder's number (one, two and three digits), a nil as NULL, a
    /// quoted identifier and text that is not ASCII come out as the `String` they were built as before.
    @Test func interpolationWritesEveryPlaceholderAndPieceOfText() {
        let none: Int? = nil
        let some: Int? = 7
        let mixed: PostgresQuery = "SELECT \(1), \(none) AS \(identifier: "wé\"ird"), \(some) -- ü💩 \(unescaped: "é")"
        #expect(mixed.sql == "SELECT $1, $2 AS \"wé\"\"ird\", $3 -- ü💩 é")
        #expect(mixed.binds == ["1", nil, "7"])

        var interpolation = PostgresQuery.StringInterpolation(literalCapacity: 0, interpolationCount: 0)
        var expected = "VALUES ("
        interpolation.appendLiteral("VALUES (")
        for number in 1...120 {
            if number > 1 {
                interpolation.appendLiteral(", ")
                expected += ", "
            }
            interpolation.appendInterpolation(number)
            expected += "$\(number)"
        }
        interpolation.appendLiteral(")")
        expected += ")"
        let wide = PostgresQuery(stringInterpolation: interpolation)
        #expect(wide.sql == expected)
        #expect(wide.binds == (1...120).map { String($0) })
    }

    @Test func dateTextRoundTripsAtMicrosecondPrecision() throws {
        for seconds in [0.0, -1.5, 1_700_000_000.123456, -62_135_596_800, 253_402_300_799.5] {
            let date = Date(timeIntervalSince1970: seconds)
            let parsed = try #require(PostgresDate.parse(try PostgresDate.format(date)))
            #expect(abs(parsed.timeIntervalSince1970 - seconds) < 0.000_001)
        }
        #expect(PostgresDate.parse("2026-11-21 10:00:00+05:30") == PostgresDate.parse("2026-11-21 04:30:00+00"))
        #expect(PostgresDate.parse("2026-11-21 00:00:00-03:30:15")?.timeIntervalSince1970 == 1_795_231_815)
        #expect(throws: PostgresClientError.self) { try PostgresDate.format(Date(timeIntervalSince1970: 300_000_000_000.25)) }
        #expect(PostgresDate.parse("infinity") == nil)
        #expect(PostgresDate.parse("2026-13-01") == nil)
        #expect(PostgresDate.parse("2026-11-21 10:00:00 junk") == nil)
    }

    /// The text a timestamp parameter is sent as, against the padded-string form it was built as before.
    @Test func dateTextIsWrittenAsThePaddedForm() throws {
        func pad(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
        }
        func reference(_ date: Date) -> String? {
            guard let micros = date.microsecondsSince1970 else { return nil }
            let secondsOfDay = 86_400 * Int64(1_000_000)
            var days = micros / secondsOfDay, rest = micros % secondsOfDay
            if rest < 0 { rest += secondsOfDay; days -= 1 }
            let (year, month, day) = CivilDays.civil(fromDays: days)
            let second = rest / 1_000_000, fraction = rest % 1_000_000
            var text = "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2)) "
            text += "\(pad(second / 3600, 2)):\(pad(second / 60 % 60, 2)):\(pad(second % 60, 2))"
            if fraction != 0 { text += "." + pad(fraction, 6) }
            return text + "+00"
        }
        var generator = SystemRandomNumberGenerator()
        var dates = [0.0, -1.5, 0.000_001, 59.999_999, 1_700_000_000.123456, -62_135_596_800, 253_402_300_799.5,
                     253_402_300_799.999_999].map { Date(timeIntervalSince1970: $0) }
        for _ in 0..<3000 {
            let micros = Int64.random(in: -62_135_596_800_000_000...253_402_300_799_999_999, using: &generator)
            dates.append(Date(timeIntervalSince1970: Double(micros) / 1e6))
            dates.append(Date(timeIntervalSince1970: Double(micros / 1_000_000)))
        }
        for date in dates {
            if let expected = reference(date) {
                #expect(try PostgresDate.format(date) == expected, "\(date.timeIntervalSince1970)")
            } else {
                #expect(throws: PostgresClientError.self) { try PostgresDate.format(date) }
            }
        }
        #expect(try PostgresDate.format(Date(timeIntervalSince1970: 0)) == "1970-01-01 00:00:00+00")
        #expect(try PostgresDate.format(Date(timeIntervalSince1970: -62_135_596_800)) == "0001-01-01 00:00:00+00")
    }

    @Test func sqlStateKeepsUnknownCodesAndMatchesByCodeAndClass() {
        let unknown = SQLState(rawValue: "XX999")
        #expect(unknown.name == nil)
        #expect(unknown.description == "XX999")
        #expect(SQLState.uniqueViolation.errorClass == .integrityConstraintViolation)
        let error = PostgresError(sqlState: .uniqueViolation, message: "duplicate key", constraint: "users_email_unique")
        let wrapped: any Error = TransactionError(phase: .commit, underlying: error)
        #expect(SQLState.uniqueViolation ~= wrapped)
        #expect(!(SQLState.checkViolation ~= wrapped))
    }

    @Test func errorDescriptionNeverPrintsValues() {
        let dataError = PostgresError(sqlState: .invalidTextRepresentation,
                                      message: "invalid input syntax for type uuid: \"my-secret-device\"")
        #expect(!dataError.description.contains("my-secret-device"))
        #expect(dataError.description.contains("22P02"))
        let unique = PostgresError(sqlState: .uniqueViolation,
                                   message: "duplicate key value violates unique constraint \"users_email_unique\"",
                                   detail: "Key (email)=(chris@example.com) already exists.",
                                   table: "users", constraint: "users_email_unique")
        #expect(!unique.description.contains("chris@example.com"))
        #expect(unique.description.contains("users_email_unique"))
        #expect(unique.debugDescription.contains("chris@example.com"))
    }

    @Test func passwordsAreScrubbedFromConnectionMessages() {
        let url = "postgresql://app:s3cr%3Dt@db.invalid:5432/app"
        let password = ConnectionStringSecrets.password(in: url)
        #expect(password == "s3cr=t")
        let scrubbed = ConnectionStringSecrets.scrub("failed for s3cr=t and s3cr%3Dt", secrets: [password!, "s3cr%3Dt"])
        #expect(scrubbed == "failed for *** and ***")
        #expect(ConnectionStringSecrets.password(in: "host=x password='p w' user=u") == "p w")
        #expect(ConnectionStringSecrets.password(in: "postgresql://u:raw%zzpw@h/db") == "raw%zzpw")
    }

    /// Behind one PgBouncer per node, libpq trusted a pooler's stale "read-write" and settled on a standby after a
    /// switchover (every write 25006, for good): the hosts of a URL that asks for a writable server are known, so
    /// that a standby's can be skipped.
    @Test func aURLAskingForAWritableServerListsItsHostsInOrder() {
        let two = WritableHostSearch(connectionString: "postgresql://u:p@127.0.0.1:54311,127.0.0.1:54312/db?target_session_attrs=read-write")
        #expect(two.candidates?.map { "\($0.host):\($0.port)" } == ["127.0.0.1:54311", "127.0.0.1:54312"])
        let onePort = WritableHostSearch(connectionString: "host=a,b port=5432 dbname=x target_session_attrs=primary")
        #expect(onePort.candidates?.map { "\($0.host):\($0.port)" } == ["a:5432", "b:5432"])
        for unchecked in ["postgresql://u@a,b/db", "postgresql://u@a,b/db?target_session_attrs=any",
                          "host=a hostaddr=10.0.0.1 target_session_attrs=read-write", "host=/tmp/s target_session_attrs=read-write"] {
            #expect(!WritableHostSearch(connectionString: unchecked).checksWritability, "\(unchecked)")
        }
        #expect(!WritableHostSearch(connectionString: nil).checksWritability)
    }

    /// The writable-host check waits as long as one connect may, never without bound: libpq's 0 ("no limit") is
    /// read as 10 s, and values under 2 s as 2 s, as libpq reads them.
    @Test func theWritableHostCheckIsBoundedLikeAConnect() {
        let url = "postgresql://u@a,b/db?target_session_attrs=read-write"
        #expect(WritableHostSearch(connectionString: url).checkTimeout(default: 4) == .seconds(4))
        #expect(WritableHostSearch(connectionString: url + "&connect_timeout=7").checkTimeout(default: 4) == .seconds(7))
        #expect(WritableHostSearch(connectionString: url + "&connect_timeout=0").checkTimeout(default: 4) == .seconds(10))
        #expect(WritableHostSearch(connectionString: url + "&connect_timeout=1").checkTimeout(default: 4) == .seconds(2))
        #expect(WritableHostSearch(connectionString: url).checkTimeout(default: -1) == .seconds(10))
    }

    /// When no host is left, the error says whether they were standbys or could not answer.
    @Test func noWritableHostSaysWhy() {
        var search = WritableHostSearch(connectionString: "postgresql://u@a,b/db?target_session_attrs=read-write")
        search.noteCheck(standby: true)
        #expect(search.noWritableHost.contains("every host of the connection string is a standby"))
        search.noteCheck(standby: nil)
        #expect(search.noWritableHost.contains("1 a standby, 1 did not answer"))
        var unanswered = WritableHostSearch(connectionString: "postgresql://u@a,b/db?target_session_attrs=read-write")
        unanswered.noteCheck(standby: nil)
        #expect(unanswered.noWritableHost.contains("no host of the connection string answered"))
    }
}
