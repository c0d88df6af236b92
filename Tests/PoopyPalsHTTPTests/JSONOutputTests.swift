import Foundation
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import Values

/// The API's one JSON writer (`JSONOutput`) writes every body byte for byte as Foundation's `JSONEncoder` writes
/// the same `Encodable` body (sorted keys, timestamps as `Timestamp`): the encoder is the reference, kept here.
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
        #expect(try JSONResponse.encode(writing: body) == (try ReferenceJSON.encode(body)))
    }

    @Test func pagesAndArraysAreWrittenAsTheEncoderWritesThem() throws {
        let logs = Self.nasty.enumerated().map { Self.log($1, seconds: Double($0) * 86_399.5, version: Int64.max - Int64($0)) }
        for page in [LogPageBody(items: logs, nextCursor: "djF8MTIzfGFi-_"), LogPageBody(items: [], nextCursor: nil)] {
            #expect(try JSONResponse.encode(writing: page) == (try ReferenceJSON.encode(page)))
        }
        #expect(try JSONResponse.encode(writing: logs) == (try ReferenceJSON.encode(logs)))
        #expect(try JSONResponse.encode(writing: [LogBody]()) == (try ReferenceJSON.encode([LogBody]())))
    }

    /// One body's timestamps share the day they last turned into a date (`Timestamp.RecentDay`): runs on one day,
    /// changes of day and of year, dates before 1970 and at both ends of the range, each as written alone.
    @Test func timestampsInOneBodyAreEachWrittenAsAlone() throws {
        var seconds: [Double] = [-62_135_596_800, 253_402_300_799, 0, -1, 86_399, 86_400, 951_782_399, 951_782_400]
        var generator = SystemRandomNumberGenerator()
        var day = 20_000.0
        for _ in 0..<3000 {
            switch Int.random(in: 0..<10, using: &generator) {
            case 0: day = Double(Int.random(in: -719_162..<2_932_896, using: &generator))
            case 1: day += 1
            default: break
            }
            seconds.append(day * 86_400 + Double.random(in: 0..<86_400, using: &generator).rounded(.down))
        }
        var output = JSONOutput()
        var expected: [UInt8] = []
        for value in seconds {
            let date = Date(timeIntervalSince1970: value)
            try output.bounded(capacity: 20) { try $0.unquotedTimestamp(date) }
            expected += Array(try Timestamp.format(date).utf8)
        }
        #expect(output.bytes == expected)
    }

    @Test func integersAreWrittenAsTheirDecimalForm() throws {
        var values: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, Int64.max, Int64.min, Int64.max - 1, Int64.min + 1, 1_000_000_007]
        values += (0..<500).map { _ in Int64.random(in: Int64.min...Int64.max) }
        for value in values {
            var output = JSONOutput()
            try output.bounded(capacity: 20) { $0.integer(value) }  // 20: Int64.min's length
            #expect(output.bytes == Array(String(value).utf8), "\(value)")
        }
    }

    /// A bounded part that does not fit its declared capacity throws and leaves the output as it was: no byte is
    /// written past the buffer, whatever the piece.
    @Test(arguments: [0, 1, 5, 6, 30, 31, 50, 57, 58, 59, 93, 94, 95, 96, 200])
    func aBoundedPartThatDoesNotFitThrowsAndWritesNothing(_ capacity: Int) throws {
        var output = JSONOutput()
        output.raw("[")
        let id = UUID()
        let date = Date(timeIntervalSince1970: 1_795_222_800)
        func write(_ out: inout BoundedJSON) throws {
            out.raw(#"{"a":"#)
            out.integer(Int64.min)
            out.raw(#","b":""#)
            try out.unquotedTimestamp(date)
            out.raw(#"","c":""#)
            out.unquotedUUID(id)
            out.raw(#"""#)
        }
        let full = #"{"a":-9223372036854775808,"b":"2026-11-21T01:00:00Z","c":""# + UUIDText.lowercase(id) + "\""
        if capacity >= full.utf8.count {
            try output.bounded(capacity: capacity, write)
            #expect(output.bytes == Array(("[" + full).utf8))
        } else {
            #expect(throws: JSONOutput.Overflow.self) { try output.bounded(capacity: capacity, write) }
            #expect(output.bytes == Array("[".utf8))
        }
    }

    @Test func randomTextIsWrittenAsTheEncoderWritesIt() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let scalars = (0..<Int.random(in: 0...40, using: &generator)).compactMap { _ in
                Unicode.Scalar(UInt32.random(in: Bool.random(using: &generator) ? 0...0x7f : 0...0x10ffff, using: &generator))
            }
            let body = Self.log(String(String.UnicodeScalarView(scalars)))
            #expect(try JSONResponse.encode(writing: body) == (try ReferenceJSON.encode(body)))
        }
    }

    /// A device or user as the repositories return it, decoded from the model's own `Codable` form.
    static func model<T: Decodable>(_ type: T.Type, _ json: [String: Any?]) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        let present = json.compactMapValues { $0 }
        return try decoder.decode(T.self, from: JSONSerialization.data(withJSONObject: present))
    }

    static func device(_ text: String?, user: UUID? = UUID()) throws -> DeviceBody {
        DeviceBody(try model(Device.self, [
            "id": UUID().uuidString, "userID": user?.uuidString, "createdAt": 1_795_222_800.5, "lastSeenAt": -12_219_292_800,
            "info": ([
                "model": text, "osVersion": text, "appVersion": text.map { $0 + "1" }, "buildNumber": text, "isSimulator": text == nil,
            ] as [String: Any?]).compactMapValues { $0 },
        ]))
    }

    static func user(_ text: String?) throws -> UserBody {
        UserBody(try model(User.self, [
            "id": UUID().uuidString, "email": text ?? "a@example.com", "fullName": text, "role": "member",
            "dateOfBirth": text == nil ? nil : "0999-01-31", "createdAt": 0, "updatedAt": 253_402_300_799,
        ]))
    }

    @Test(arguments: nasty)
    func devicesUsersAndProfilesAreWrittenAsTheEncoderWritesThem(_ text: String?) throws {
        let device = try Self.device(text, user: text == nil ? nil : UUID())
        #expect(try JSONResponse.encode(writing: device) == (try ReferenceJSON.encode(device)))
        let user = try Self.user(text)
        #expect(try JSONResponse.encode(writing: user) == (try ReferenceJSON.encode(user)))
        for profile in [ProfileBody(user: user, device: device), ProfileBody(user: user, device: nil)] {
            #expect(try JSONResponse.encode(writing: profile) == (try ReferenceJSON.encode(profile)))
        }
    }

    @Test(arguments: nasty)
    func syncPagesPushesErrorsAndStatusAreWrittenAsTheEncoderWritesThem(_ text: String?) throws {
        let log = try Self.model(PoopLog.self, [
            "id": UUID().uuidString, "occurredAt": 86_399.5, "bristolType": 7, "notes": text, "createdAt": 0, "updatedAt": 1, "version": 9,
        ])
        for changes in [[], [SyncChange.upsert(log), .delete(UUID()), .upsert(log)]] {
            for hasMore in [false, true] {
                let page = SyncPageBody(SyncPage(changes: changes, cursor: text ?? "czF8MA", hasMore: hasMore))
                #expect(try JSONResponse.encode(writing: page) == (try ReferenceJSON.encode(page)))
            }
        }
        let push = PushBody(results: [.init(id: UUID().lowercased, status: text ?? "created"), .init(id: "x", status: "deleted")],
                            cursor: text ?? "")
        #expect(try JSONResponse.encode(writing: push) == (try ReferenceJSON.encode(push)))
        let error = APIError(.badRequest, text ?? "invalid_field", text ?? "notes: is too long")
        #expect(error.body() == (try ReferenceJSON.encode(APIError.Body(error: .init(code: error.code, message: error.message)))))
        #expect(try JSONResponse.encode(writing: StatusBody(status: text ?? "ok")) == (try ReferenceJSON.encode(StatusBody(status: text ?? "ok"))))
    }

    /// The streamed export (its head, comma-joined batches, and `]}`) is one JSON document holding what each
    /// part's body holds, for no batch, one, and several.
    @Test(arguments: [0, 1, 3])
    func theStreamedExportIsOneDocument(_ batches: Int) throws {
        let device = try Self.device("iPhone \"15\"")
        for profile in [try Self.user("Chris"), nil] {
            var output = JSONOutput()
            try ExportHead(device: device, profile: profile, profileLinked: profile != nil).write(to: &output)
            var logs: [LogBody] = []
            for batch in 0..<batches {
                if batch > 0 { output.raw(",") }
                let part = Self.nasty.prefix(batch + 1).map { Self.log($0) }
                try part.writeElements(to: &output)
                logs += part
            }
            output.raw("]}")
            let parsed = try #require(try JSONSerialization.jsonObject(with: Data(output.bytes)) as? NSDictionary)
            var expected: [String: Any] = [
                "device": try JSONSerialization.jsonObject(with: Data(try ReferenceJSON.encode(device))),
                "logs": try JSONSerialization.jsonObject(with: Data(try ReferenceJSON.encode(logs))),
                "profileLinked": profile != nil,
            ]
            if let profile { expected["profile"] = try JSONSerialization.jsonObject(with: Data(try ReferenceJSON.encode(profile))) }
            #expect(parsed == expected as NSDictionary)
        }
    }
}

/// Foundation's encoder with the API's settings: the reference `JSONOutput` is compared with.
enum ReferenceJSON {
    static func encode(_ value: some Encodable) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(try Timestamp.format(date))
        }
        return Array(try encoder.encode(value))
    }
}

@Suite("Request log fields")
struct RequestLogFieldTests {
    @Test func durationsAreMillisecondsWithTwoDecimalsRoundedHalfUp() {
        #expect(APIMiddleware.milliseconds(.zero) == "0.00")
        #expect(APIMiddleware.milliseconds(.nanoseconds(4_999)) == "0.00")
        #expect(APIMiddleware.milliseconds(.nanoseconds(5_000)) == "0.01")
        #expect(APIMiddleware.milliseconds(.microseconds(90)) == "0.09")
        #expect(APIMiddleware.milliseconds(.microseconds(1_250)) == "1.25")
        #expect(APIMiddleware.milliseconds(.nanoseconds(1_999_995_000)) == "2000.00")
        #expect(APIMiddleware.milliseconds(.seconds(3)) == "3000.00")
        #expect(APIMiddleware.milliseconds(.seconds(-1)) == "0.00")
        #expect(APIMiddleware.milliseconds(.seconds(Int64.max)) == "\(Int64.max)000.00")
        // Away from halves, what String(format: "%.2f") printed before.
        for _ in 0..<2000 {
            let nanoseconds = Int64.random(in: 0..<100_000_000_000)
            guard (nanoseconds % 10_000) != 5_000 else { continue }
            let expected = String(format: "%.2f", Double(nanoseconds) / 1e6)
            #expect(APIMiddleware.milliseconds(.nanoseconds(nanoseconds)) == expected, "\(nanoseconds) ns")
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
