import Foundation
@testable import PoopyPalsHTTP
import Testing

/// The API's JSON reader takes what RFC 8259 allows and Foundation reads the same way, and refuses the rest.
@Suite("JSON parser")
struct JSONParserTests {
    static func parse(_ text: String) -> Result<JSONValue, JSONParser.Failure> {
        Result { () throws(JSONParser.Failure) in try JSONParser.parse(text) }
    }

    @Test(arguments: [
        (#"{}"#, JSONValue.object([:])),
        (#" [ ] "#, .array([])),
        (#"{"a":[1,-0.5,2e3,1E-2,true,false,null],"b":{"c":"d"}}"#,
         .object(["a": .array([.number(1), .number(-0.5), .number(2000), .number(0.01), .bool(true), .bool(false), .null]),
                  "b": .object(["c": .string("d")])])),
        ("\t\r\n{\"occurredAt\" : \"2026-11-20T08:00:00Z\" ,\n \"bristolType\":4}\n",
         .object(["occurredAt": .string("2026-11-20T08:00:00Z"), "bristolType": .number(4)])),
        (#""quote \" backslash \\ slash \/ \b\f\n\r\t""#, .string("quote \" backslash \\ slash / \u{8}\u{c}\n\r\t")),
        (#""\u00e9\u6c49\ud83d\udca9 é汉💩""#, .string("é汉💩 é汉💩")),
        (#""\u0000""#, .string("\u{0}")),
        (#"-0"#, .number(0)),
        (#"9007199254740993"#, .number(9_007_199_254_740_992)),
        (#"1.7976931348623157e308"#, .number(.greatestFiniteMagnitude)),
        (#"4.9e-324"#, .number(.leastNonzeroMagnitude)),
    ])
    func validDocumentsAreRead(_ text: String, _ expected: JSONValue) throws {
        #expect(try Self.parse(text).get() == expected)
        // Foundation reads them too.
        #expect((try? JSONSerialization.jsonObject(with: Data(text.utf8), options: .fragmentsAllowed)) != nil)
    }

    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{'a':1}", "[1 2]", "01", "-", "1.", ".5", "1e", "+1",
        "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "tru", "nul", "True", "\"open", "\"tab\there\"", "\"new\nline\"",
        "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "[1] [2]", "{} x", "/* c */ {}", "{\"a\":1} // c",
        "\u{feff}{}", String(repeating: "[", count: 513) + String(repeating: "]", count: 513),
    ])
    func everythingElseIsRefused(_ text: String) {
        #expect(Self.parse(text) == .failure(.invalid), "\(text.prefix(40))")
    }

    @Test func invalidUTF8IsRefused() {
        for bytes: [UInt8] in [[0x22, 0xff, 0x22], [0x22, 0xc3, 0x22], [0x22, 0xed, 0xa0, 0x80, 0x22], [0x22, 0xc0, 0xaf, 0x22],
                               [0x7b, 0x22, 0xe2, 0x82, 0x22, 0x3a, 0x31, 0x7d]] {
            let result = bytes.withUnsafeBufferPointer { buffer in Result { () throws(JSONParser.Failure) in try JSONParser.parse(buffer) } }
            #expect(result == .failure(.invalid), "\(bytes)")
        }
    }

    @Test func nestingUpToTheLimitIsRead() throws {
        let depth = JSONParser.maximumDepth
        let text = String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)
        var value = try Self.parse(text).get()
        for _ in 0..<depth {
            guard case .array(let items) = value, items.count == 1 else { Issue.record("not nested"); return }
            value = items[0]
        }
        #expect(value == .number(1))
        #expect(Self.parse("{\"a\":" + text + "}") == .failure(.invalid))  // one deeper
    }

    /// Random documents written by Foundation are read back as they were made: every string, and every number to
    /// the bit (Foundation writes doubles so that they round-trip, and `Double(String)` rounds correctly; Foundation's
    /// own reader on Linux goes through `Decimal` and can be a few units off in the last place, so it is not the
    /// reference).
    @Test func randomDocumentsAreReadBackAsTheyWereMade() throws {
        var generator = SystemRandomNumberGenerator()
        func random(_ depth: Int) -> Any {
            switch Int.random(in: depth > 3 ? 0...3 : 0...5, using: &generator) {
            case 0: return Double.random(in: -1e12...1e12, using: &generator).rounded()
            case 1: return Double.random(in: -1...1, using: &generator)
            case 2: return String(String.UnicodeScalarView((0..<Int.random(in: 0...12, using: &generator)).compactMap { _ in
                Unicode.Scalar(UInt32.random(in: Bool.random(using: &generator) ? 0...0x7f : 0...0x10ffff, using: &generator)) }))
            case 3: return NSNull()
            case 4: return (0..<Int.random(in: 0...4, using: &generator)).map { _ in random(depth + 1) }
            default:
                var object: [String: Any] = [:]
                for index in 0..<Int.random(in: 0...4, using: &generator) { object["k\(index)\(Int.random(in: 0...9, using: &generator))"] = random(depth + 1) }
                return object
            }
        }
        func same(_ value: JSONValue, _ foundation: Any) -> Bool {
            switch value {
            case .null: return foundation is NSNull
            case .bool: return false
            case .number(let number): return (foundation as? NSNumber)?.doubleValue == number
            case .string(let text): return foundation as? String == text
            case .array(let items):
                guard let other = foundation as? [Any], other.count == items.count else { return false }
                return zip(items, other).allSatisfy { same($0, $1) }
            case .object(let object):
                guard let other = foundation as? [String: Any], other.count == object.count else { return false }
                return object.allSatisfy { key, item in other[key].map { same(item, $0) } ?? false }
            }
        }
        for _ in 0..<300 {
            let document = random(0)
            let data = try JSONSerialization.data(withJSONObject: document, options: .fragmentsAllowed)
            let parsed = try data.withUnsafeBytes { raw in
                try JSONParser.parse(UnsafeBufferPointer(start: raw.baseAddress?.assumingMemoryBound(to: UInt8.self), count: raw.count))
            }
            #expect(same(parsed, document), "\(String(decoding: data, as: UTF8.self).prefix(200))")
        }
    }
}

extension JSONParser {
    /// `parse` on a string's UTF-8, for tests.
    static func parse(_ text: String) throws(Failure) -> JSONValue {
        var text = text
        do {
            return try text.withUTF8 { try parse($0) }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw .invalid
        }
    }
}
