import HTTPTypes
import NIOCore
import NIOHTTP1

/// Writes a response's bytes as NIO's `HTTPResponseEncoder` (behind `HTTP1ToHTTPServerCodec`) wrote them, without
/// their per-part hops and the `HTTPResponseHead` and `HTTPHeaders` each head was copied into (`ResponseEncoderTests`
/// compares the bytes with theirs):
/// - the status line with NIO's reason phrase for the codes it knows, the head's own for the others;
/// - the fields in order, by their raw names;
/// - framing: a status that has no body (1xx, 204, 304) or the answer to CONNECT loses Content-Length and
///   Transfer-Encoding; Content-Length wins over Transfer-Encoding; neither means `Transfer-Encoding: chunked`,
///   added last, and chunks framed as such;
/// - the answer to HEAD or CONNECT keeps its head's framing fields but carries no body bytes.
///
/// The server's encoder (`addsDate`) also writes a `Date` field into every head that has none, after the head's own
/// fields, as Hummingbird's server added it: the connection's own `HTTPDate`, formatted once a second.
struct ResponseEncoder {
    /// The `Date` field's cache; nil: no field is added (the encoder NIO's is compared with).
    private var dates: HTTPDate?

    init(addsDate: Bool) {
        dates = addsDate ? HTTPDate() : nil
    }

    /// The current response's body is chunked on the wire.
    private(set) var chunked = false
    /// The current response carries no body bytes (it answers HEAD or CONNECT).
    private(set) var bodySuppressed = false

    /// The status lines of codes 100–599 with HTTPTypes' default phrases, as NIO writes them.
    private static let statusLines: [[UInt8]] = (100...599).map { code in
        let status = HTTPResponseStatus(statusCode: code, reasonPhrase: HTTPResponse.Status(code: code).reasonPhrase)
        return Array("HTTP/1.1 \(code) \(status.reasonPhrase)\r\n".utf8)
    }

    /// Starts a response: its head into `buffer`, in one write (one field at a time, as NIO wrote it, was four
    /// writes a field with an exclusivity check each: 20 a response). `method` is the request's.
    mutating func writeHead(_ head: HTTPResponse, answering method: HTTPRequest.Method, into buffer: inout ByteBuffer) {
        let code = head.status.code
        var ownLine: [UInt8] = []
        if !(100...599).contains(code) || head.status.reasonPhrase != HTTPResponse.Status(code: code).reasonPhrase {
            let status = HTTPResponseStatus(statusCode: code, reasonPhrase: head.status.reasonPhrase)
            ownLine = Array("HTTP/1.1 \(code) \(status.reasonPhrase)\r\n".utf8)
        }
        let statusLine = ownLine.isEmpty ? Self.statusLines[code - 100] : ownLine
        let isConnect = method == .connect
        let mayHaveBody = !isConnect && HTTPResponseStatus(statusCode: code).mayHaveResponseBody
        // The framing fields, found by their canonical names' lengths first: comparing every field's name with
        // both was 15 string comparisons a response.
        var hasLength = false, hasFraming = false, hasDate = false
        for field in head.headerFields {
            switch KnownField(field.name) {
            case .contentLength: hasLength = true; hasFraming = true
            case .transferEncoding: hasFraming = true
            case .date: hasDate = true
            case nil: break
            }
        }
        let date = hasDate ? nil : dates?.now()
        hasLength = hasLength && mayHaveBody
        // Without a body: neither framing field. With a length: no Transfer-Encoding. Without one: ours, last.
        func written(_ field: HTTPField) -> Bool {
            guard hasFraming else { return true }
            switch KnownField(field.name) {
            case .contentLength: return hasLength
            case .transferEncoding: return false
            case .date, nil: return true
            }
        }
        let chunkedOnTheWire = mayHaveBody && !hasLength
        let chunkedField: StaticString = "transfer-encoding: chunked\r\n"
        var length = statusLine.count + 2 + (chunkedOnTheWire ? chunkedField.utf8CodeUnitCount : 0)
        if let date { length += Self.dateName.utf8CodeUnitCount + date.utf8.count + 2 }
        for field in head.headerFields where written(field) {
            length += field.name.rawName.utf8.count + field.value.utf8.count + 4
        }
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { raw in
            var out = HeadWriter(raw: raw)
            statusLine.withUnsafeBytes { out.put($0) }
            for field in head.headerFields where written(field) {
                out.put(field.name.rawName)
                out.put(Self.separator)
                out.put(field.value)
                out.put(Self.lineEnd)
            }
            if let date {
                out.put(Self.dateName)
                out.put(date)
                out.put(Self.lineEnd)
            }
            if chunkedOnTheWire { out.put(chunkedField) }
            out.put(Self.lineEnd)
            return out.at
        }
        bodySuppressed = isConnect || method == .head
        chunked = chunkedOnTheWire && !bodySuppressed
    }

    /// The fields `writeHead` looks for: the framing fields, and `Date`.
    private enum KnownField {
        case contentLength, transferEncoding, date

        init?(_ name: HTTPField.Name) {
            let canonical = name.canonicalName
            switch canonical.utf8.count {
            case 4 where canonical == "date": self = .date
            case 14 where canonical == "content-length": self = .contentLength
            case 17 where canonical == "transfer-encoding": self = .transferEncoding
            default: return nil
            }
        }
    }

    /// Copies a head's pieces into the buffer, one after another. A struct, not nested functions around a captured
    /// `var`: the captured variable had a run-time exclusivity check per piece (18 a response, 1.5 k instructions).
    private struct HeadWriter {
        let raw: UnsafeMutableRawBufferPointer
        var at = 0

        mutating func put(_ bytes: UnsafeRawBufferPointer) {
            // `writeHead` counted every byte put; the check keeps a miscount from writing past the buffer.
            guard let target = raw.baseAddress, let source = bytes.baseAddress, bytes.count <= raw.count - at else { return }
            (target + at).copyMemory(from: source, byteCount: bytes.count)
            at += bytes.count
        }

        mutating func put(_ text: String) {
            var text = text
            text.withUTF8 { put(UnsafeRawBufferPointer($0)) }
        }

        mutating func put(_ text: StaticString) {
            put(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        }
    }

    private static let separator: StaticString = ": "
    private static let dateName: StaticString = "Date: "
    private static let lineEnd: StaticString = "\r\n"

    /// A chunk of the body as it goes on the wire: nothing for an answer to HEAD or an empty chunk; framed when
    /// chunked. `write` is called with each part in order.
    func writeBody(_ chunk: ByteBuffer, allocator: ByteBufferAllocator, _ write: (ByteBuffer) -> Void) {
        guard !bodySuppressed, chunk.readableBytes > 0 else { return }
        guard chunked else { return write(chunk) }
        var size = allocator.buffer(capacity: 32)
        size.writeString(String(chunk.readableBytes, radix: 16))
        size.writeStaticString("\r\n")
        write(size)
        write(chunk)
        var end = allocator.buffer(capacity: 2)
        end.writeStaticString("\r\n")
        write(end)
    }

    /// The end of the body: the last chunk and trailers when chunked, else nothing (nil).
    func end(_ trailers: HTTPFields?, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard chunked else { return nil }
        var buffer = allocator.buffer(capacity: 8)
        buffer.writeStaticString("0\r\n")
        for field in trailers ?? [:] {
            buffer.writeString(field.name.rawName)
            buffer.writeStaticString(": ")
            buffer.writeString(field.value)
            buffer.writeStaticString("\r\n")
        }
        buffer.writeStaticString("\r\n")
        return buffer
    }
}
