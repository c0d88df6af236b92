import Foundation
import Hummingbird
import NIOCore
import PoopyPalsData
import PostgresClient

/// A JSON object read from a request, with field-level errors. Fields the server owns (ids of other rows,
/// roles, timestamps) are refused by name rather than silently ignored, and unknown fields are refused too.
struct JSONBody {
    private let object: [String: JSONValue]

    /// - Throws: `APIError` 400 for bad JSON or a refused field; 413 over 64 KiB.
    static func read(_ request: Request, context: APIContext, allowed: Set<String>, serverOwned: Set<String> = []) async throws -> JSONBody {
        let buffer = try await request.body.collect(upTo: context.maxUploadSize)
        guard buffer.readableBytes > 0 else { return JSONBody(object: [:]) }
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(buffer: buffer))
        } catch {
            throw APIError(.badRequest, "invalid_json", "the body is not valid JSON")
        }
        guard case .object(let object) = value else { throw APIError(.badRequest, "invalid_json", "the body must be a JSON object") }
        for key in object.keys.sorted() {
            if serverOwned.contains(key) { throw APIError.invalid(key, "is set by the server and cannot be sent") }
            if !allowed.contains(key) { throw APIError.invalid(key, "is not a known field") }
        }
        return JSONBody(object: object)
    }

    func isNull(_ key: String) -> Bool { object[key] == .null }

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
            guard let int = Int(exactly: value) else { throw APIError.invalid(key, "must be an integer") }
            return int
        default: throw APIError.invalid(key, "must be an integer")
        }
    }

    func uuid(_ key: String) throws -> UUID? {
        guard let text = try string(key) else { return nil }
        guard let id = UUID(uuidString: text) else { throw APIError.invalid(key, "must be a UUID") }
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

/// JSON responses: camelCase keys, ISO 8601 UTC timestamps with their fractional seconds.
enum JSONResponse {
    static func make(_ status: HTTPResponse.Status, _ value: some Encodable) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.format(date))
        }
        let data = try encoder.encode(value)
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// ISO 8601 in UTC, keeping microseconds (PostgreSQL's resolution) when there are any.
enum Timestamp {
    static func format(_ date: Date) -> String {
        let micros = Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
        var seconds = micros / 1_000_000
        var fraction = micros % 1_000_000
        if fraction < 0 { fraction += 1_000_000; seconds -= 1 }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        var text = formatter.string(from: Date(timeIntervalSince1970: Double(seconds)))
        if fraction != 0 {
            var digits = String(fraction)
            digits = String(repeating: "0", count: 6 - digits.count) + digits
            while digits.hasSuffix("0") { digits.removeLast() }
            text.insert(contentsOf: "." + digits, at: text.index(before: text.endIndex))
        }
        return text
    }

    /// `2026-11-21T05:00:00Z`, `…00.123Z`, `…00.123456+02:00`; a zone is required.
    static func parse(_ text: String) -> Date? {
        guard text.count <= 40, let t = text.firstIndex(of: "T") else { return nil }
        var base = text
        var fraction = 0.0
        if let dot = text[t...].firstIndex(of: ".") {
            let digits = text[text.index(after: dot)...].prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty, digits.count <= 9, let value = Double("0." + digits) else { return nil }
            fraction = value
            base = String(text[..<dot]) + String(text[text.index(after: dot)...].dropFirst(digits.count))
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        guard let date = formatter.date(from: base) else { return nil }
        return date.addingTimeInterval(fraction)
    }
}
