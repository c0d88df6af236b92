import Foundation
@testable import PoopyPalsData
import Testing

@Suite("Codecs")
struct CodecTests {
    @Test func base64URLIsRFC4648SectionFiveWithoutPadding() {
        #expect(Base64URL.encode(Array("f".utf8)) == "Zg")
        #expect(Base64URL.encode(Array("fo".utf8)) == "Zm8")
        #expect(Base64URL.encode(Array("foo".utf8)) == "Zm9v")
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
        #expect(Base64URL.decode("-_8") == [0xfb, 0xff])
        #expect(Base64URL.decode("Zm8") == Array("fo".utf8))
        // The standard alphabet is not base64url.
        #expect(Base64URL.decode("+/8") == nil)
        #expect(Base64URL.decode("Zm8*") == nil)
        for length in 0..<40 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }

    @Test func cursorsRoundTripAndRefuseAnythingElse() throws {
        for sequence: Int64 in [0, 1, 62, 63, 1 << 40, .max] {
            let cursor = SyncCursor(sequence: sequence)
            #expect(try SyncCursor(encoded: cursor.encoded) == cursor)
            #expect(!cursor.encoded.contains("=") && !cursor.encoded.contains("+") && !cursor.encoded.contains("/"))
        }
        #expect(throws: InvalidField.self) { try SyncCursor(encoded: Base64URL.encode(Array("s1|-1".utf8))) }
        #expect(throws: InvalidField.self) { try SyncCursor(encoded: Base64URL.encode(Array("s2|1".utf8))) }
        #expect(throws: InvalidField.self) { try SyncCursor(encoded: String(repeating: "A", count: 65)) }
    }
}
