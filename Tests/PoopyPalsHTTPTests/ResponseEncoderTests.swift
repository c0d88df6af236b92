import Foundation
import HTTPTypes
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
@testable import PoopyPalsHTTP
import Testing

/// `ResponseEncoder` writes what NIO's `HTTPResponseEncoder` behind `HTTP1ToHTTPServerCodec` wrote (the pipeline
/// Hummingbird's HTTP/1 channel set up), byte for byte; requests are read as NIO's conversion read them.
@Suite("HTTP/1 as NIO wrote and read it")
struct ResponseEncoderTests {
    /// The reference: NIO's server pipeline, told the request's method by its own parser.
    static func reference(_ head: HTTPResponse, chunks: [ByteBuffer], trailers: HTTPFields?, method: String) throws -> [UInt8] {
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish() }
        try channel.pipeline.syncOperations.configureHTTPServerPipeline(withPipeliningAssistance: false, withErrorHandling: false,
                                                                         withOutboundHeaderValidation: false)
        try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
        try channel.writeInbound(ByteBuffer(string: "\(method) \(method == "CONNECT" ? "example.com:443" : "/") HTTP/1.1\r\nHost: x\r\n\r\n"))
        while try channel.readInbound(as: HTTPRequestPart.self) != nil {}
        try channel.writeOutbound(HTTPResponsePart.head(head))
        // NIO refuses body bytes after a HEAD or CONNECT answer's head (ours drops them): none are sent to it.
        if method != "HEAD" && method != "CONNECT" {
            for chunk in chunks { try channel.writeOutbound(HTTPResponsePart.body(chunk)) }
        }
        try channel.writeOutbound(HTTPResponsePart.end(trailers))
        var bytes: [UInt8] = []
        while let buffer = try channel.readOutbound(as: IOData.self) {
            guard case .byteBuffer(let part) = buffer else { continue }
            bytes += part.readableBytesView
        }
        return bytes
    }

    static func ours(_ head: HTTPResponse, chunks: [ByteBuffer], trailers: HTTPFields?, method: String) throws -> [UInt8] {
        var encoder = ResponseEncoder(addsDate: false)
        var buffer = ByteBuffer()
        encoder.writeHead(head, answering: try #require(HTTPRequest.Method(method)), into: &buffer)
        var bytes = Array(buffer.readableBytesView)
        for chunk in chunks {
            encoder.writeBody(chunk, allocator: ByteBufferAllocator()) { bytes += $0.readableBytesView }
        }
        if let end = encoder.end(trailers, allocator: ByteBufferAllocator()) { bytes += end.readableBytesView }
        return bytes
    }

    static let fieldSets: [[(String, String)]] = [
        [],
        [("Content-Type", "application/json; charset=utf-8"), ("Content-Length", "5"), ("X-Request-ID", "abc")],
        [("content-length", "0")],
        [("Content-Type", "application/x-ndjson"), ("Cache-Control", "no-store")],
        [("Transfer-Encoding", "gzip"), ("X-A", "1")],
        [("Transfer-Encoding", "chunked"), ("Content-Length", "5"), ("X-B", "2")],
        [("Allow", "GET, PUT"), ("Allow", "DELETE"), ("set-cookie", "a=1"), ("Set-Cookie", "b=2"), ("X-Unicode", "é")],
    ]

    @Test(arguments: ["GET", "POST", "HEAD", "CONNECT"])
    func everyStatusFramingAndMethodIsWrittenAsNIOWroteIt(method: String) throws {
        let bodies: [[ByteBuffer]] = [[], [ByteBuffer(string: "hello")], [ByteBuffer(string: "{\"a\":"), ByteBuffer(), ByteBuffer(string: "1}")],
                                      [ByteBuffer(repeating: 0x61, count: 70_000)]]
        var compared = 0
        for code in [100, 101, 103, 199, 200, 201, 204, 205, 299, 304, 400, 401, 404, 405, 408, 409, 413, 414, 415, 422, 431, 499, 500, 503, 599] {
            for fields in Self.fieldSets {
                for chunks in bodies {
                    for trailers in [nil, HTTPFields([HTTPField(name: .init("X-Checksum")!, value: "1")])] {
                        var head = HTTPResponse(status: .init(code: code))
                        for (name, value) in fields { head.headerFields.append(HTTPField(name: try #require(HTTPField.Name(name)), value: value)) }
                        let expected = try Self.reference(head, chunks: chunks, trailers: trailers, method: method)
                        let actual = try Self.ours(head, chunks: chunks, trailers: trailers, method: method)
                        let same = actual == expected  // not expanded: the arrays run to 70 000 bytes
                        #expect(same, "\(method) \(code) \(fields) \(chunks.map(\.readableBytes)) \(trailers != nil): \(String(decoding: actual.prefix(300), as: UTF8.self)) vs \(String(decoding: expected.prefix(300), as: UTF8.self))")
                        compared += 1
                    }
                }
            }
        }
        #expect(compared == 25 * 7 * 4 * 2)
    }

    /// The server's encoder adds the current second's `Date` after the head's own fields, before the framing it
    /// adds itself; a head that has its own `Date` keeps it, alone.
    @Test func theServersEncoderAddsTheCurrentDateUnlessTheHeadHasOne() throws {
        var encoder = ResponseEncoder(addsDate: true)
        var head = HTTPResponse(status: .ok)
        head.headerFields[.contentType] = "text/plain"
        for round in 0..<3 {
            let before = Int(Date().timeIntervalSince1970)
            var buffer = ByteBuffer()
            encoder.writeHead(head, answering: .get, into: &buffer)
            let after = Int(Date().timeIntervalSince1970)
            let text = String(buffer: buffer)
            let dates = text.matches(of: /\r\nDate: ([^\r]*)\r\n/).map { String($0.output.1) }
            #expect(dates.count == 1, "round \(round): \(text)")
            // A second from `before` to `after`: a thread stalled longer than a second inside writeHead (a loaded
            // machine) still passes, as it should.
            #expect(dates.first.map { date in (before...after).contains { HTTPDate.format($0) == date } } == true, "\(dates)")
            #expect(text.hasPrefix("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: "), "\(text)")
            #expect(text.hasSuffix(" GMT\r\ntransfer-encoding: chunked\r\n\r\n"), "\(text)")
        }
        head.headerFields[.date] = "Tue, 29 Feb 2000 00:00:00 GMT"
        var buffer = ByteBuffer()
        encoder.writeHead(head, answering: .get, into: &buffer)
        let text = String(buffer: buffer)
        #expect(text.matches(of: #/Date: /#).count == 1, "\(text)")
        #expect(text.contains("\r\nDate: Tue, 29 Feb 2000 00:00:00 GMT\r\n"), "\(text)")
    }

    @Test func aPhraseOfItsOwnIsKeptForACodeNIODoesNotKnow() throws {
        let head = HTTPResponse(status: .init(code: 299, reasonPhrase: "Fine Anyway"))
        let expected = try Self.reference(head, chunks: [], trailers: nil, method: "GET")
        #expect(try Self.ours(head, chunks: [], trailers: nil, method: "GET") == expected)
        #expect(String(decoding: expected, as: UTF8.self).hasPrefix("HTTP/1.1 299 Fine Anyway\r\n"))
    }

    /// Requests are read as NIO's conversion reads them, for any target and Host header.
    @Test func requestHeadsAreConvertedAsNIOConvertsThem() throws {
        var generator = SystemRandomNumberGenerator()
        let pieces = ["/", "/v1/logs", "?limit=20", "&before=x", "%20", "%zz", " ", "#frag", "//evil.example", ":", "@", "http:",
                      "https://example.com/a?b", "*", "example.com:443", "é", "/..", "a", "\\", "[::1]"]
        let hosts: [[String]] = [[], ["x"], ["a.example", "b.example"], [""]]
        let methods: [HTTPMethod] = [.GET, .POST, .HEAD, .CONNECT, .OPTIONS, .RAW(value: "BREW"), .RAW(value: "B@D")]
        var compared = 0
        for round in 0..<3_000 {
            let uri = (0..<Int.random(in: 0...4, using: &generator)).map { _ in pieces.randomElement(using: &generator) ?? "" }.joined()
            var headers = HTTPHeaders()
            for host in hosts[round % hosts.count] { headers.add(name: round % 2 == 0 ? "Host" : "host", value: host) }
            headers.add(name: "X-Device-ID", value: "\(round)")
            let head = HTTPRequestHead(version: .http1_1, method: methods[round % methods.count], uri: uri, headers: headers)
            let expected = Result { try HTTPRequest(head, secure: false, splitCookie: false) }
            let actual = Result { try HTTPRequest(origin: head) }
            switch (expected, actual) {
            case (.success(let expected), .success(let actual)):
                #expect(actual == expected, "\(uri)")
            case (.failure, .failure): break
            default: Issue.record("\(head.method) \(uri): \(expected) vs \(actual)")
            }
            compared += 1
        }
        #expect(compared == 3_000)
    }
}
