import Foundation
@testable import PostgresClient
import Testing

@Suite("No database needed")
struct UnitTests {
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

    @Test func interpolationBindsValuesAndOnlyUnescapedIsRaw() {
        let email = "x'); DROP TABLE users; --"
        let table = "users"
        let query: PostgresQuery = "SELECT * FROM \(unescaped: table) WHERE email = \(email) AND age > \(3)"
        #expect(query.sql == "SELECT * FROM users WHERE email = $1 AND age > $2")
        #expect(query.binds == [email, "3"])
        #expect(query.description.contains("DROP") == false)
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
}
