import Foundation
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import Values

/// The hand-written JSON of the hot bodies is byte for byte what `JSONEncoder` (the rest of the API) writes.
@Suite("JSON output")
struct JSONOutputTests {
    static let nasty: [String?] = [
        nil, "", "plain", "quote \" backslash \\ slash / end", "é ü 汉字 🧻💩", "\u{2028}\u{2029}\u{7f}\u{feff}",
        String((0..<0x20).map { Character(Unicode.Scalar(UInt8($0))) }), "tab\there\nnew line\r\n", "\\u0000 as text",
        "</script><script>alert(1)</script>", String(repeating: "x", count: 2000),
    ]

    static func log(_ notes: String?, seconds: Double = 1_795_222_800.75, version: Int64 = 42) -> LogBody {
        LogBody(id: UUID(), occurredAt: Date(timeIntervalSince1970: seconds), bristolType: 4, notes: notes,
                createdAt: Date(timeIntervalSince1970: seconds + 1.5), updatedAt: Date(timeIntervalSince1970: seconds + 86_400),
                version: version)
    }

    @Test(arguments: nasty)
    func aLogIsWrittenAsTheEncoderWritesIt(_ notes: String?) throws {
        let body = Self.log(notes)
        #expect(try JSONResponse.encode(writing: body) == Array(try JSONResponse.encode(body)))
    }

    @Test func pagesAndArraysAreWrittenAsTheEncoderWritesThem() throws {
        let logs = Self.nasty.enumerated().map { Self.log($1, seconds: Double($0) * 86_399.5, version: Int64.max - Int64($0)) }
        for page in [LogPageBody(items: logs, nextCursor: "djF8MTIzfGFi-_"), LogPageBody(items: [], nextCursor: nil)] {
            #expect(try JSONResponse.encode(writing: page) == Array(try JSONResponse.encode(page)))
        }
        #expect(try JSONResponse.encode(writing: logs) == Array(try JSONResponse.encode(logs)))
        #expect(try JSONResponse.encode(writing: [LogBody]()) == Array(try JSONResponse.encode([LogBody]())))
    }

    @Test func randomTextIsWrittenAsTheEncoderWritesIt() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let scalars = (0..<Int.random(in: 0...40, using: &generator)).compactMap { _ in
                Unicode.Scalar(UInt32.random(in: Bool.random(using: &generator) ? 0...0x7f : 0...0x10ffff, using: &generator))
            }
            let body = Self.log(String(String.UnicodeScalarView(scalars)))
            #expect(try JSONResponse.encode(writing: body) == Array(try JSONResponse.encode(body)))
        }
    }
}

@Suite("Request log fields")
struct RequestLogFieldTests {
    @Test func durationsAreMillisecondsWithTwoDecimalsRoundedHalfUp() {
        #expect(RequestLogMiddleware.milliseconds(.zero) == "0.00")
        #expect(RequestLogMiddleware.milliseconds(.nanoseconds(4_999)) == "0.00")
        #expect(RequestLogMiddleware.milliseconds(.nanoseconds(5_000)) == "0.01")
        #expect(RequestLogMiddleware.milliseconds(.microseconds(90)) == "0.09")
        #expect(RequestLogMiddleware.milliseconds(.microseconds(1_250)) == "1.25")
        #expect(RequestLogMiddleware.milliseconds(.nanoseconds(1_999_995_000)) == "2000.00")
        #expect(RequestLogMiddleware.milliseconds(.seconds(3)) == "3000.00")
        #expect(RequestLogMiddleware.milliseconds(.seconds(-1)) == "0.00")
        #expect(RequestLogMiddleware.milliseconds(.seconds(Int64.max)) == "\(Int64.max)000.00")
        // Away from halves, what String(format: "%.2f") printed before.
        for _ in 0..<2000 {
            let nanoseconds = Int64.random(in: 0..<100_000_000_000)
            guard (nanoseconds % 10_000) != 5_000 else { continue }
            let expected = String(format: "%.2f", Double(nanoseconds) / 1e6)
            #expect(RequestLogMiddleware.milliseconds(.nanoseconds(nanoseconds)) == expected, "\(nanoseconds) ns")
        }
    }

    @Test func requestIDsAreRandomVersionFourUUIDs() {
        var seen = Set<UUID>()
        for _ in 0..<2000 {
            let id = UUIDText.random()
            let text = UUIDText.lowercase(id)
            #expect(Array(text)[14] == "4")
            #expect("89ab".contains(Array(text)[19]))
            #expect(UUIDText.parse(text) == id)
            seen.insert(id)
        }
        #expect(seen.count == 2000)
    }
}
