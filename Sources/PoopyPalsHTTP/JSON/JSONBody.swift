import Foundation
import Hummingbird
import NIOCore
import PoopyPalsData
import Values

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
        guard isJSON(request.headers.value(of: .contentType)) else {
            throw APIError(.unsupportedMediaType, "unsupported_media_type", "the body must be sent as Content-Type: application/json")
        }
        let value: JSONValue
        do {
            value = try buffer.withUnsafeReadableBytes { raw in
                try JSONParser.parse(UnsafeBufferPointer(start: raw.baseAddress?.assumingMemoryBound(to: UInt8.self), count: raw.count))
            }
        } catch JSONParser.Failure.duplicateKey(let key) {
            throw duplicate(key)
        } catch {
            throw APIError(.badRequest, "invalid_json", "the body is not valid JSON")
        }
        guard case .object(let object) = value else { throw APIError(.badRequest, "invalid_json", "the body must be a JSON object") }
        // Sorted only to name the same refused key every time, when there is one.
        if object.keys.allSatisfy({ allowed.contains($0) && !serverOwned.contains($0) }) { return JSONBody(object: object) }
        for key in object.keys.sorted() {
            if serverOwned.contains(key) { throw APIError.invalid(key, "is set by the server and cannot be sent") }
            if !allowed.contains(key) { throw APIError.invalid(key, "is not a known field") }
        }
        return JSONBody(object: object)
    }

    private static func duplicate(_ key: String) -> APIError {
        APIError(.badRequest, "invalid_json", "the key \(StrictQuery.quoted(key)) appears more than once in one object")
    }

    /// `application/json` or a `+json` type, any parameters (`; charset=utf-8`), any case: the media type is the
    /// first non-empty part before a `;`, trimmed of spaces and tabs.
    ///
    /// Read on the header's bytes when they are ASCII (every real client's): Foundation's `trimmingCharacters`
    /// went through a UTF-16 copy and cost 13.6 k of a `POST /v1/logs`'s 384 k instructions (callgrind). Any other
    /// value goes the general way, with Unicode's spaces and case.
    static func isJSON(_ contentType: String?) -> Bool {
        guard var contentType else { return false }
        if let answer = contentType.withUTF8({ isJSON(ascii: $0) }) { return answer }
        let media = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        return media == "application/json" || (media.hasPrefix("application/") && media.hasSuffix("+json"))
    }

    /// The answer for an ASCII value; nil for any other.
    private static func isJSON(ascii bytes: UnsafeBufferPointer<UInt8>) -> Bool? {
        guard bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
        // Empty parts are skipped, as `split` omits them.
        var start = 0
        while start < bytes.count, bytes[start] == UInt8(ascii: ";") { start += 1 }
        var end = start
        while end < bytes.count, bytes[end] != UInt8(ascii: ";") { end += 1 }
        func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        while start < end, isBlank(bytes[start]) { start += 1 }
        while end > start, isBlank(bytes[end - 1]) { end -= 1 }
        let media = UnsafeBufferPointer(rebasing: bytes[start..<end])
        func matches(_ expected: StaticString, at offset: Int) -> Bool {
            let count = expected.utf8CodeUnitCount
            guard offset >= 0, offset + count <= media.count else { return false }
            let wanted = UnsafeBufferPointer(start: expected.utf8Start, count: count)
            for index in 0..<count {
                var byte = media[offset + index]
                if byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { byte += 32 }
                if byte != wanted[index] { return false }
            }
            return true
        }
        if media.count == 16 && matches("application/json", at: 0) { return true }
        return matches("application/", at: 0) && matches("+json", at: media.count - 5)
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
