import Foundation
import Hummingbird
import NIOCore
import PoopyPalsData
import PostgresClient

/// A JSON object read from a request, with field-level errors. Fields the server owns (ids of other rows,
/// roles, timestamps) are refused by name rather than silently ignored, and unknown fields are refused too.
struct JSONBody {
    private let object: [String: JSONValue]

    /// - Throws: `APIError` 400 for bad JSON, a key given twice or a refused field; 413 over 64 KiB; 415 for a
    ///   body that is not declared `application/json`.
    static func read(_ request: Request, context: APIContext, allowed: Set<String>, serverOwned: Set<String> = []) async throws -> JSONBody {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: context.maxUploadSize)
        } catch let error as NIOTooManyBytesError {
            throw error
        } catch {
            // The connection ended before the body did (shorter than its Content-Length): the client's fault.
            throw APIError(.badRequest, "incomplete_body", "the body ended before its Content-Length")
        }
        guard buffer.readableBytes > 0 else { return JSONBody(object: [:]) }
        guard isJSON(request.headers[.contentType]) else {
            throw APIError(.unsupportedMediaType, "unsupported_media_type", "the body must be sent as Content-Type: application/json")
        }
        let data = Data(buffer: buffer)
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            // Foundation refuses some repeated keys itself; say which.
            if let key = JSONDuplicateKeys.first(in: data) { throw duplicate(key) }
            throw APIError(.badRequest, "invalid_json", "the body is not valid JSON")
        }
        if let key = JSONDuplicateKeys.first(in: data) { throw duplicate(key) }
        guard case .object(let object) = value else { throw APIError(.badRequest, "invalid_json", "the body must be a JSON object") }
        for key in object.keys.sorted() {
            if serverOwned.contains(key) { throw APIError.invalid(key, "is set by the server and cannot be sent") }
            if !allowed.contains(key) { throw APIError.invalid(key, "is not a known field") }
        }
        return JSONBody(object: object)
    }

    private static func duplicate(_ key: String) -> APIError {
        APIError(.badRequest, "invalid_json", "the key \(StrictQueryMiddleware.quoted(key)) appears more than once in one object")
    }

    /// `application/json` or a `+json` type, any parameters (`; charset=utf-8`), any case.
    static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let media = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        return media == "application/json" || (media.hasPrefix("application/") && media.hasSuffix("+json"))
    }

    /// 2^53 - 1, the largest integer a double holds exactly (JavaScript's `Number.MAX_SAFE_INTEGER`).
    static let largestExactInteger: Double = 9_007_199_254_740_991

    func isNull(_ key: String) -> Bool { object[key] == .null }

    /// Refuses `null` for a field a PATCH may change but not clear.
    func refuseNull(_ key: String) throws {
        if isNull(key) { throw APIError.invalid(key, "cannot be null (every log has one)") }
    }

    /// The raw value of `key`, for nested structures read by their own parser.
    func value(_ key: String) -> JSONValue? { object[key] }

    /// A nested object read as a body of its own (its own allowed fields, errors named with `prefix`).
    static func nested(_ value: JSONValue, prefix: String, allowed: Set<String>) throws -> JSONBody {
        guard case .object(let object) = value else { throw APIError.invalid(prefix, "must be an object") }
        for key in object.keys.sorted() where !allowed.contains(key) {
            throw APIError.invalid("\(prefix).\(key)", "is not a known field")
        }
        return JSONBody(object: object)
    }

    func string(_ key: String) throws -> String? {
        switch object[key] {
        case nil, .null: return nil
        case .string(let text): return text
        default: throw APIError.invalid(key, "must be a string")
        }
    }

    func bool(_ key: String) throws -> Bool? {
        switch object[key] {
        case nil, .null: return nil
        case .bool(let value): return value
        default: throw APIError.invalid(key, "must be true or false")
        }
    }

    func int(_ key: String) throws -> Int? {
        switch object[key] {
        case nil, .null: return nil
        case .number(let value):
            // JSON numbers arrive as doubles: past 2^53 - 1 neighbouring integers share one double, so the value
            // read might not be the value sent. openapi.yaml bounds every integer within this range.
            guard abs(value) <= Self.largestExactInteger, let int = Int(exactly: value) else {
                throw APIError.invalid(key, "must be an integer from -(2^53 - 1) to 2^53 - 1")
            }
            return int
        default: throw APIError.invalid(key, "must be an integer")
        }
    }

    func uuid(_ key: String) throws -> UUID? {
        guard let text = try string(key) else { return nil }
        guard let id = UUIDText.parse(text) else { throw APIError.invalid(key, "must be a UUID") }
        return id
    }

    func timestamp(_ key: String) throws -> Date? {
        guard let text = try string(key) else { return nil }
        guard let date = Timestamp.parse(text) else { throw APIError.invalid(key, "must be an ISO 8601 timestamp with a time zone") }
        return date
    }

    func date(_ key: String) throws -> CalendarDate? {
        guard let text = try string(key) else { return nil }
        guard let date = CalendarDate(text) else { throw APIError.invalid(key, "must be a date, YYYY-MM-DD") }
        return date
    }

    /// Absent: `.unchanged`; `null`: `.clear`; a value: `.set`, read with `read`.
    func update<T>(_ key: String, _ read: (String) throws -> T?) throws -> FieldUpdate<T> {
        guard object[key] != nil else { return .unchanged }
        if isNull(key) { return .clear }
        guard let value = try read(key) else { return .clear }
        return .set(value)
    }

    func required<T>(_ key: String, _ read: (String) throws -> T?) throws -> T {
        guard let value = try read(key) else { throw APIError.invalid(key, "is required") }
        return value
    }
}

/// Any JSON value, keeping booleans and numbers apart.
enum JSONValue: Decodable, Equatable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([JSONValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }
}

/// JSON responses: camelCase keys, sorted; timestamps as `Timestamp.format` writes them.
enum JSONResponse {
    static let contentType = "application/json; charset=utf-8"

    /// The API's JSON: sorted keys, timestamps as `Timestamp` formats them.
    static func encode(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(try Timestamp.format(date))
        }
        return try encoder.encode(value)
    }

    /// The same bytes as `encode`, written by the value itself (the hot bodies: see `JSONOutput`).
    static func encode(writing value: some JSONWritable) throws -> [UInt8] {
        var output = JSONOutput()
        try value.write(to: &output)
        return output.bytes
    }

    static func make(_ status: HTTPResponse.Status, writing value: some JSONWritable) throws -> Response {
        let bytes = try encode(writing: value)
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func make(_ status: HTTPResponse.Status, _ value: some Encodable) throws -> Response {
        let data = try encode(value)
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// Timestamps out: RFC 3339 in UTC to the whole second, always (`2026-11-23T10:00:00Z`), the one form that
/// every client decodes (swift-openapi-generator's default transcoder, `JSONDecoder.iso8601`). Stored log
/// times are whole seconds (sql/0011); other times (createdAt, updatedAt) are rounded down. In: any RFC 3339
/// time with a zone, fractions accepted.
///
/// Out: our own formatter (days to a proleptic Gregorian date with `PostgresDate.civil`, Hinnant's algorithm): Foundation's
/// `Date.ISO8601FormatStyle` cost 5 % of the server's CPU listing 20 logs, and it writes dates before 1582 in
/// the Julian calendar, so a log at 1000-03-01 read back as 1000-02-24. In: our own parser, because Foundation's
/// (measured, Swift 6.3.1 on Linux) takes `2026-02-31T10:00:00Z` as 3 March and `24:00:00` as the next day,
/// refuses RFC 3339's lower-case `t`/`z`, and counts years before 1582 in the Julian calendar too. A time that
/// does not exist is a 400 here.
enum Timestamp {
    private static func fields(_ date: Date) throws -> Fields {
        guard let micros = date.microsecondsSince1970 else {
            throw EncodingError.invalidValue(date, .init(codingPath: [], debugDescription: "a date outside the years 1 to 9999"))
        }
        // Whole seconds, rounded down.
        var seconds = micros / 1_000_000
        if micros % 1_000_000 < 0 { seconds -= 1 }
        var days = seconds / 86_400
        var time = seconds % 86_400
        if time < 0 {
            time += 86_400
            days -= 1
        }
        let (year, month, day) = PostgresDate.civil(fromDays: days)
        return Fields(year: year, month: month, day: day, time: time)
    }

    /// The 20 bytes of `format(_:)`, appended to `bytes` without an intermediate string.
    static func append(_ date: Date, to bytes: inout [UInt8]) throws {
        let fields = try fields(date)
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: 20))
        _ = bytes.withUnsafeMutableBufferPointer { buffer in
            fields.write(into: UnsafeMutableBufferPointer(rebasing: buffer[start...]))
        }
    }

    /// - Throws: `EncodingError` for a date outside years 1…9999 (never produced by the database).
    static func format(_ date: Date) throws -> String {
        let fields = try fields(date)
        return String(unsafeUninitializedCapacity: 20) { fields.write(into: $0) }
    }

    private struct Fields {
        let year: Int64, month: Int64, day: Int64, time: Int64

        @discardableResult
        func write(into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
            func put(_ value: Int64, digits: Int, at offset: Int) {
                var value = value
                for index in stride(from: offset + digits - 1, through: offset, by: -1) {
                    buffer[index] = UInt8(truncatingIfNeeded: 48 + value % 10)
                    value /= 10
                }
            }
            put(year, digits: 4, at: 0)
            buffer[4] = UInt8(ascii: "-")
            put(month, digits: 2, at: 5)
            buffer[7] = UInt8(ascii: "-")
            put(day, digits: 2, at: 8)
            buffer[10] = UInt8(ascii: "T")
            put(time / 3600, digits: 2, at: 11)
            buffer[13] = UInt8(ascii: ":")
            put(time / 60 % 60, digits: 2, at: 14)
            buffer[16] = UInt8(ascii: ":")
            put(time % 60, digits: 2, at: 17)
            buffer[19] = UInt8(ascii: "Z")
            return 20
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; the zone is required.
    static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.count <= 40 else { return nil }
        var index = 0
        func number(_ count: Int) -> Int? {
            guard index + count <= bytes.count else { return nil }
            var value = 0
            for _ in 0..<count {
                guard (48...57).contains(bytes[index]) else { return nil }
                value = value * 10 + Int(bytes[index] - 48)
                index += 1
            }
            return value
        }
        func expect(_ character: Character) -> Bool {
            guard index < bytes.count, bytes[index] == character.asciiValue! else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2),
              expect("T") || expect("t"), let hour = number(2), expect(":"), let minute = number(2), expect(":"),
              let second = number(2), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var fraction = 0.0
        if expect(".") {
            var scale = 0.1
            let start = index
            while index < bytes.count, (48...57).contains(bytes[index]), index - start < 9 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        var offset = 0
        if expect("Z") || expect("z") {
        } else if index < bytes.count, bytes[index] == 43 || bytes[index] == 45 {
            let sign = bytes[index] == 43 ? 1 : -1
            index += 1
            guard let hours = number(2), expect(":"), let minutes = number(2), hours < 24, minutes < 60 else { return nil }
            offset = sign * (hours * 3600 + minutes * 60)
        } else {
            return nil
        }
        guard index == bytes.count else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        // timegm normalises 31 February into March; refuse dates that do not exist.
        guard parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        return Date(timeIntervalSince1970: Double(seconds - offset) + fraction)
    }
}
