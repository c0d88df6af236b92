import Foundation
import Testing
@testable import Values

/// The tables the timestamp and UUID writers read without bounds checks: a wrong or short table would write
/// wrong digits or read past its end.
@Suite("Digit tables")
struct DigitTableTests {
    private func text(_ table: StaticString) -> String {
        String(decoding: UnsafeBufferPointer(start: table.utf8Start, count: table.utf8CodeUnitCount), as: UTF8.self)
    }

    @Test func decimalPairsAreEveryTwoDigitNumberInOrder() {
        let expected = (0..<100).map { (number: Int) -> String in number < 10 ? "0\(number)" : "\(number)" }.joined()
        #expect(text(Timestamp.digitPairs) == expected)
    }

    @Test func hexPairsAreEveryByteInLowerCaseInOrder() {
        let expected = (0..<256).map { (byte: Int) -> String in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
        #expect(text(UUIDText.hexPairs) == expected)
    }

    /// Every byte value in every position, against Foundation's form.
    @Test func everyByteValueIsWrittenAsFoundationWritesIt() {
        for value in 0...255 {
            let byte = UInt8(value), next = UInt8((value + 1) % 256)
            let uuid = UUID(uuid: (byte, next, byte, next, byte, next, byte, next, byte, next, byte, next, byte, next, byte, next))
            #expect(UUIDText.lowercase(uuid) == uuid.uuidString.lowercased())
        }
    }

    /// The writers refuse a buffer too small, and a timestamp outside years 1…9999 is an error, never digits.
    @Test func shortBuffersAndDatesOutOfRangeWriteNothing() throws {
        var small = [UInt8](repeating: 0, count: 19)
        let written = try small.withUnsafeMutableBufferPointer { try Timestamp.write(Date(timeIntervalSince1970: 0), into: $0) }
        #expect(written == 0)
        #expect(small.allSatisfy { $0 == 0 })
        var short = [UInt8](repeating: 0, count: 35)
        #expect(short.withUnsafeMutableBufferPointer { UUIDText.write(UUID(), into: $0) } == 0)
        #expect(throws: EncodingError.self) { try Timestamp.format(Date(timeIntervalSince1970: 253_402_300_800)) }  // 10000-01-01
        #expect(throws: EncodingError.self) { try Timestamp.format(Date(timeIntervalSince1970: -62_135_596_801)) }  // 0000-12-31
        #expect(try Timestamp.format(Date(timeIntervalSince1970: 253_402_300_799)) == "9999-12-31T23:59:59Z")
        #expect(try Timestamp.format(Date(timeIntervalSince1970: -62_135_596_800)) == "0001-01-01T00:00:00Z")
    }

    /// The 32-bit path agrees with the general one on every day it takes, and just past both ends of it.
    @Test func everyDateOfYearsZeroToNineThousandNineHundredNinetyNineMatchesTheGeneralConversion() {
        var mismatches = 0
        for days in Int64(-719_478)...2_932_906 where CivilDays.civil(fromDays: days) != CivilDays.civilReference(fromDays: days) {
            mismatches += 1
        }
        #expect(mismatches == 0)
        #expect(CivilDays.civil(fromDays: -719_468) == (0, 3, 1))
        #expect(CivilDays.civil(fromDays: 2_932_896) == (9999, 12, 31))
        #expect(CivilDays.civil(fromDays: 0) == (1970, 1, 1))
        #expect(CivilDays.civil(fromDays: -719_469) == (0, 2, 29))
    }
}
