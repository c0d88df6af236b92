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
        // With the position a standby must have replayed (a push's commit): the longest form still fits 64.
        for position: UInt64 in [0, 1, 0x16_B374_D848, .max] {
            let cursor = SyncCursor(sequence: .max, position: ConsistencyToken(position: position))
            #expect(try SyncCursor(encoded: cursor.encoded) == cursor)
            #expect(cursor.encoded.utf8.count <= 64)
        }
        #expect(try SyncCursor(encoded: Base64URL.encode(Array("s2|7|00000016b374d848".utf8)))
                == SyncCursor(sequence: 7, position: ConsistencyToken(lsn: "16/B374D848")))
        for bad in ["s1|-1", "s1|+1", "s1|", "s1|1|0000000000000001", "s2|1", "s2|1|", "s2|1|000000000000001",
                    "s2|1|00000000000000001", "s2|1|000000000000000A", "s2|1|000000000000000g", "s2|-1|0000000000000001",
                    "s2|1|0000000000000001|", "s3|1", "s1|99999999999999999999", "s1| 1"] {
            #expect(throws: InvalidField.self, "\(bad)") { try SyncCursor(encoded: Base64URL.encode(Array(bad.utf8))) }
        }
        #expect(throws: InvalidField.self) { try SyncCursor(encoded: String(repeating: "A", count: 65)) }
        #expect(throws: InvalidField("before", "is not a valid cursor")) { try SyncCursor(encoded: "*", field: "before") }
    }
}
