import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import TestSupport

/// The server says what `openapi.yaml` says, in one form every client parses, and refuses ambiguous input.
@Suite("HTTP conformance")
struct ConformanceTests {
    static var wholeSecond: Regex<Substring> { /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/ }

    @Test func aKnownPathWithAnotherMethodIs405WithAllow() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            for method in ["TRACE", "OPTIONS", "PATCH", "POST"] {
                let reply = try await api.send(method, "/v1/device", device: device)
                #expect(reply.status == 405, "\(method): \(reply.status)")
                #expect(reply.header("Allow") == "DELETE, GET, PUT", "\(method)")
                #expect(reply.errorCode == "method_not_allowed", "\(method)")
            }
            let head = try await api.send("HEAD", "/v1/logs", device: device)
            #expect(head.status == 405 && head.header("Allow") == "GET, POST")
            let put = try await api.send("PUT", "/v1/logs/\(UUID().uuidString)", device: device, json: "{}")
            #expect(put.status == 405 && put.header("Allow") == "DELETE, GET, PATCH")
            let unknown = try await api.send("GET", "/v1/nothing", device: device)
            #expect(unknown.status == 404 && unknown.errorCode == "not_found")
        }
    }

    @Test func aBodyThatIsNotDeclaredJSONIs415() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let body = Data(#"{"occurredAt": "2026-01-01T10:00:00Z", "bristolType": 4}"#.utf8)
            for type in ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"] {
                let reply = try await api.send("POST", "/v1/logs", device: device, headers: ["Content-Type": type], body: body)
                #expect(reply.status == 415 && reply.errorCode == "unsupported_media_type", "\(type): \(reply.status)")
            }
            for type in ["application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"] {
                let reply = try await api.send("POST", "/v1/logs", device: device, headers: ["Content-Type": type], body: body)
                #expect(reply.status == 201, "\(type): \(reply.status) \(reply.text)")
            }
        }
    }

    /// Nesting as deep as the parser takes is read (and refused as a field), one level deeper and a body that is
    /// nothing but 64 000 open brackets are invalid JSON; the server answers each, on its own threads' stacks.
    @Test func deeplyNestedBodiesAreAnsweredNotCrashedOn() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            func nested(_ depth: Int) -> String {
                #"{"occurredAt": "2026-01-01T10:00:00Z", "bristolType": 4, "notes": "# + String(repeating: "[", count: depth)
                    + String(repeating: "]", count: depth) + "}"
            }
            let deepest = try await api.send("POST", "/v1/logs", device: device, json: nested(JSONParser.maximumDepth - 1))
            #expect(deepest.status == 400 && deepest.errorCode == "invalid_field" && deepest.text.contains("notes"), "\(deepest.text)")
            let deeper = try await api.send("POST", "/v1/logs", device: device, json: nested(JSONParser.maximumDepth))
            #expect(deeper.status == 400 && deeper.errorCode == "invalid_json", "\(deeper.text)")
            let brackets = try await api.send("POST", "/v1/logs", device: device, json: String(repeating: "[", count: 64_000))
            #expect(brackets.status == 400 && brackets.errorCode == "invalid_json", "\(brackets.text)")
            #expect(try await api.send("GET", "/v1/logs", device: device).status == 200)
        }
    }

    @Test func aKeyGivenTwiceOrAQueryParameterGivenTwiceIs400() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            for json in [#"{"occurredAt": "2026-01-01T10:00:00Z", "bristolType": 4, "bristolType": 7}"#,
                         #"{"occurredAt": "2026-01-01T10:00:00Z", "bristolType": 4, "bristol\u0054ype": 7}"#] {
                let reply = try await api.send("POST", "/v1/logs", device: device, json: json)
                #expect(reply.status == 400 && reply.errorCode == "invalid_json" && reply.text.contains("bristolType"), "\(reply.text)")
            }
            let nested = #"{"operations": [{"op": "upsert", "log": {"id": "\#(UUID().uuidString)", "occurredAt": "2026-01-01T10:00:00Z", "bristolType": 2, "notes": "a", "notes": "b"}}]}"#
            #expect(try await api.send("POST", "/v1/sync", device: device, json: nested).status == 400)
            // The same key in two different objects is fine.
            let twoObjects = #"{"operations": [{"op": "delete", "id": "\#(UUID().uuidString)"}, {"op": "delete", "id": "\#(UUID().uuidString)"}]}"#
            #expect(try await api.send("POST", "/v1/sync", device: device, json: twoObjects).status == 200)
            #expect(try await api.send("GET", "/v1/logs?limit=1", device: device).status == 200)
            let twice = try await api.send("GET", "/v1/logs?limit=1&limit=500", device: device)
            #expect(twice.status == 400 && twice.text.contains("'limit'"), "\(twice.text)")
            let unknown = try await api.send("GET", "/v1/logs?limit=1&_=123", device: device)
            #expect(unknown.status == 400 && unknown.text.contains("not known"), "\(unknown.text)")
            #expect(try await api.send("GET", "/v1/device?limit=1", device: device).status == 400)
        }
    }

    #if canImport(Glibc)
    /// A body that ends before its Content-Length is the client's error (400), not ours (it was a 500).
    @Test func aBodyShorterThanItsContentLengthIs400() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let port = try #require(api.base.port)
            let request = "POST /v1/logs HTTP/1.1\r\nHost: x\r\nX-Device-ID: \(device.uuidString)\r\n"
                + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":1}"
            let answer = await Self.exchange(port: port, request)
            #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer.prefix(200))")
            #expect(answer.contains("incomplete_body"))
        }
    }
    #endif

    #if canImport(Glibc)
    /// Sends raw bytes, closes the sending side, and reads the whole answer.
    static func exchange(port: Int, _ request: String) async -> String {
        await LoadTests.blocking { () -> String in
            guard let fd = LoadTests.connect(port: port) else { return "" }
            defer { close(fd) }
            var bytes = Array(request.utf8)
            var sent = 0
            while sent < bytes.count {
                let count = bytes.withUnsafeMutableBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
                if count <= 0 { break }
                sent += count
            }
            shutdown(fd, Int32(SHUT_WR))
            var received = [UInt8](repeating: 0, count: 4096)
            var text = ""
            while true {
                let count = recv(fd, &received, received.count, 0)
                if count <= 0 { break }
                text += String(decoding: received[0..<count], as: UTF8.self)
            }
            return text
        }
    }

    /// What the HTTP parser refuses gets the API's JSON error too (it was Hummingbird's empty 400 for all of these).
    @Test func malformedHTTPGetsAJSONErrorWithAPreciseStatus() async throws {
        try await TestDatabase.withAPI { api, _ in
            let port = try #require(api.base.port)
            let long = String(repeating: "a", count: 20 * 1024)
            let cases: [(name: String, request: String, status: Int, code: String)] = [
                ("two Content-Length", "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "malformed_request"),
                ("Content-Length and chunked", "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400, "malformed_request"),
                ("bad method", "G(T /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed_request"),
                ("a 20 KiB header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: \(long)\r\n\r\n", 431, "headers_too_large"),
                ("150 headers", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + (0..<150).map { "X-H\($0): v\r\n" }.joined() + "\r\n", 431, "headers_too_large"),
                ("a 20 KiB request line", "GET /healthz?\(long) HTTP/1.1\r\nHost: x\r\n\r\n", 431, "headers_too_large"),
                ("a 10 KiB target", "GET /v1/logs?before=\(long.prefix(10 * 1024)) HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
            ]
            for item in cases {
                let answer = await Self.exchange(port: port, item.request)
                let (head, _, body) = answer.partition("\r\n\r\n")
                #expect(head.hasPrefix("HTTP/1.1 \(item.status)"), "\(item.name): \(answer.prefix(300))")
                #expect(head.lowercased().contains("content-type: application/json"), "\(item.name)")
                #expect(head.lowercased().contains("x-request-id: "), "\(item.name)")
                #expect(head.contains("\r\nDate: "), "\(item.name): our own answers carry a Date too")
                let json = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: [String: String]]
                #expect(json?["error"]?["code"] == item.code, "\(item.name): \(body.prefix(300))")
                #expect(json?["error"]?["message"]?.isEmpty == false, "\(item.name)")
            }
            // A good request, then a malformed one in the same stream: the first is answered, then the error.
            let pipelined = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
            let answer = await Self.exchange(port: port, pipelined)
            let statuses = answer.matches(of: /HTTP\/1\.1 (\d{3})/).map { String($0.output.1) }
            #expect(statuses == ["200", "400"], "\(answer.prefix(600))")
            #expect(answer.contains("malformed_request"))
            // The server still serves.
            #expect(try await api.send("GET", "/healthz").status == 200)
        }
    }
    #endif

    @Test func duplicateKeysAreFoundWhereverTheyAre() {
        func duplicate(_ text: String) -> String? {
            do {
                _ = try JSONParser.parse(text)
                return nil
            } catch {
                if case .duplicateKey(let key) = error { return key }
                return "refused as invalid"
            }
        }
        #expect(duplicate(#"{"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}"#) == nil)
        #expect(duplicate(#"{"a": {"x": 1, "x": 2}}"#) == "x")
        #expect(duplicate(#"{"a": "\"a\"", "a": 1}"#) == "a")
        #expect(duplicate(#"[{"k": "v"}, {"k": "v", "\u006b": 0}]"#) == "k")
        #expect(duplicate(#"{"a": ["a", "a"], "b": "a"}"#) == nil)
    }

    /// Whole-second RFC 3339 everywhere: what a generated client's default transcoder and `.iso8601` decode.
    @Test func timestampsAreWholeSecondsAndAValueReadAndSentBackIsAReplay() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let id = UUID().uuidString.lowercased()
            let created = try await api.send("POST", "/v1/logs", device: device,
                                             json: #"{"id": "\#(id)", "occurredAt": "2026-01-01T10:00:00.987654+01:00", "bristolType": 4}"#)
            #expect(created.status == 201)
            let occurredAt = try #require(created.json?["occurredAt"] as? String)
            #expect(occurredAt == "2026-01-01T09:00:00Z")
            for key in ["occurredAt", "createdAt", "updatedAt"] {
                let value = try #require(created.json?[key] as? String)
                #expect(value.wholeMatch(of: Self.wholeSecond) != nil, "\(key): \(value)")
            }
            struct Log: Decodable { let occurredAt: Date; let createdAt: Date; let updatedAt: Date }
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            #expect((try? decoder.decode(Log.self, from: created.body)) != nil)
            // Sent back as read, or as first sent: the same log, not a conflict.
            for time in [occurredAt, "2026-01-01T10:00:00.987654+01:00", "2026-01-01T09:00:00.5Z"] {
                let replay = try await api.send("POST", "/v1/logs", device: device, json: #"{"id": "\#(id)", "occurredAt": "\#(time)", "bristolType": 4}"#)
                #expect(replay.status == 200, "\(time): \(replay.status) \(replay.text)")
            }
        }
    }

    @Test func anEmptyNotesStringClearsNotes() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let created = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt": "2026-01-01T10:00:00Z", "bristolType": 4, "notes": "x"}"#)
            let id = try #require(created.json?["id"] as? String)
            let cleared = try await api.send("PATCH", "/v1/logs/\(id)", device: device, json: #"{"notes": ""}"#)
            #expect(cleared.status == 200 && cleared.json?["notes"] is NSNull, "\(cleared.text)")
            let empty = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt": "2026-01-01T10:00:00Z", "bristolType": 4, "notes": ""}"#)
            #expect(empty.status == 201 && empty.json?["notes"] is NSNull)
        }
    }
}

@Suite("Command-line exit statuses")
struct ExitStatusTests {
    /// 0/1/2 for every command, usage errors included (ArgumentParser's own is 64).
    @Test func aUsageErrorExitsTwo() async throws {
        for arguments in [["migrate", "--target", "x"], ["no-such-command"], ["users", "erase"], ["serve", "--port", "70000"]] {
            let output = try await TestProject.run(arguments)
            #expect(output.status == 2, "\(arguments): \(output.status)")
            #expect(output.stderr.contains("Error") || output.stderr.contains("error"), "\(arguments)")
        }
        #expect(try await TestProject.run(["--help"]).status == 0)
    }
}

extension String {
    /// The text before the first `separator`, the separator, and the rest (all of it before, when absent).
    func partition(_ separator: String) -> (String, String, String) {
        guard let range = range(of: separator) else { return (self, "", "") }
        return (String(self[..<range.lowerBound]), separator, String(self[range.upperBound...]))
    }
}
