import Foundation
@testable import PoopyPalsData
import Testing

@Suite("Migration files, checksums and statement splitting")
struct MigrationUnitTests {
    /// The checksum of a known text, pinned: a change of digest (or of normalisation) would make every
    /// applied migration look edited.
    @Test func checksumIsTheSHA256OfTheNormalisedText() {
        #expect(MigrationFile.checksum(of: "") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(MigrationFile.checksum(of: "abc\n\n") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func checksumIgnoresLineEndingsTrailingWhitespaceAndBOM() {
        let base = MigrationFile.checksum(of: "CREATE TABLE a (id int);\nSELECT 1;\n")
        #expect(MigrationFile.checksum(of: "CREATE TABLE a (id int);\r\nSELECT 1;\r\n") == base)
        #expect(MigrationFile.checksum(of: "\u{FEFF}CREATE TABLE a (id int);   \nSELECT 1;\t\n\n\n") == base)
        #expect(MigrationFile.checksum(of: "CREATE TABLE a (id bigint);\nSELECT 1;\n") != base)
        #expect(MigrationFile.checksum(of: "CREATE TABLE  a (id int);\nSELECT 1;\n") != base)
    }

    @Test func fileNamesAreValidated() throws {
        let file = try MigrationFile(fileName: "0012_add_index.sql", sql: "-- poopypals:no-transaction\nSELECT 1;")
        #expect(file.version == 12)
        #expect(file.name == "add_index")
        #expect(file.runsInTransaction == false)
        #expect(try MigrationFile(fileName: "0001_x.sql", sql: "SELECT 1").runsInTransaction)
        for bad in ["0001.sql", "abc_x.sql", "0001_Bad-Name.sql", "0000_zero.sql", "_x.sql"] {
            #expect(throws: MigrationError.self) { try MigrationFile(fileName: bad, sql: "") }
        }
    }

    @Test func duplicateVersionsAreRefused() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("dup-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try "SELECT 1;".write(to: folder.appendingPathComponent("0001_a.sql"), atomically: true, encoding: .utf8)
        try "SELECT 2;".write(to: folder.appendingPathComponent("01_b.sql"), atomically: true, encoding: .utf8)
        let error = #expect(throws: MigrationError.self) { try MigrationFile.load(directory: folder) }
        #expect(error.map { "\($0)" }?.contains("0001_a.sql") == true)
    }

    @Test func splitterKeepsSemicolonsInsideQuotesCommentsAndBodies() {
        let sql = """
            -- leading; comment
            CREATE TABLE a (t text DEFAULT 'x;y', "odd;name" int);
            /* block ; /* nested ; */ still comment; */
            CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 1; END $body$;
            DO $$ BEGIN PERFORM 1; END $$;
            SELECT E'it\\'s; fine', 'it''s; fine', $1;
            CREATE FUNCTION g() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END;
            ;
            SELECT 'last without semicolon'
            """
        let statements = SQLScript(sql).statements
        #expect(statements.map(\.keyword) == ["CREATE", "CREATE", "DO", "SELECT", "CREATE", "SELECT"])
        #expect(statements.map(\.line) == [2, 4, 5, 6, 7, 9])
        #expect(statements[0].text.hasSuffix("\"odd;name\" int)"))
        #expect(statements[1].text.contains("$body$ BEGIN RETURN 1; END $body$"))
        #expect(statements[4].text.hasSuffix("SELECT 2; END"))
    }

    @Test func locationsAreLineAndColumn() {
        let script = SQLScript("SELECT 1;\nSELECT\n  oops;")
        #expect(script.location(ofOffset: 0) == (1, 1))
        #expect(script.location(ofOffset: 12) == (2, 3))
        #expect(script.location(ofOffset: 19) == (3, 3))
    }
}
