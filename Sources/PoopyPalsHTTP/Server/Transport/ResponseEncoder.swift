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
struct ResponseEncoder {
    /// The current response's body is chunked on the wire.
    private(set) var chunked = false
    /// The current response carries no body bytes (it answers HEAD or CONNECT).
    private(set) var bodySuppressed = false

    /// The status lines of codes 100–599 with HTTPTypes' default phrases, as NIO writes them.
    private static let statusLines: [[UInt8]] = (100...599).map { code in
        let status = HTTPResponseStatus(statusCode: code, reasonPhrase: HTTPResponse.Status(code: code).reasonPhrase)
        return Array("HTTP/1.1 \(code) \(status.reasonPhrase)\r\n".utf8)
    }

    /// Starts a response: its head into `buffer`. `method` is the request's.
    mutating func writeHead(_ head: HTTPResponse, answering method: HTTPRequest.Method, into buffer: inout ByteBuffer) {
        let code = head.status.code
        if (100...599).contains(code), head.status.reasonPhrase == HTTPResponse.Status(code: code).reasonPhrase {
            buffer.writeBytes(Self.statusLines[code - 100])
        } else {
            let status = HTTPResponseStatus(statusCode: code, reasonPhrase: head.status.reasonPhrase)
            buffer.writeString("HTTP/1.1 \(code) \(status.reasonPhrase)\r\n")
        }
        let isConnect = method == .connect
        let mayHaveBody = !isConnect && HTTPResponseStatus(statusCode: code).mayHaveResponseBody
        let hasLength = mayHaveBody && head.headerFields.contains(.contentLength)
        for field in head.headerFields {
            if field.name == .contentLength || field.name == .transferEncoding {
                // Without a body: neither. With a length: no Transfer-Encoding. Without one: ours, below.
                guard mayHaveBody && hasLength && field.name == .contentLength else { continue }
            }
            buffer.writeString(field.name.rawName)
            buffer.writeStaticString(": ")
            buffer.writeString(field.value)
            buffer.writeStaticString("\r\n")
        }
        let chunkedOnTheWire = mayHaveBody && !hasLength
        if chunkedOnTheWire { buffer.writeStaticString("transfer-encoding: chunked\r\n") }
        buffer.writeStaticString("\r\n")
        bodySuppressed = isConnect || method == .head
        chunked = chunkedOnTheWire && !bodySuppressed
    }

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
