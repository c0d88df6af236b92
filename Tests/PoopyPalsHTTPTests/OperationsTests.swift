import Foundation
import Hummingbird
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import Yams
import TestSupport

@Suite("Errors, limits and operations")
struct OperationsTests {
    @Test func oversizeAndMalformedBodiesAre413And400NeverA500() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            _ = try await api.send("PUT", "/v1/device", device: device)
            let big = #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4,"notes":""# + String(repeating: "a", count: 70_000) + #""}"#
            let tooLarge = try await api.send("POST", "/v1/logs", device: device, json: big)
            #expect(tooLarge.status == 413)
            #expect(tooLarge.errorCode == "payload_too_large")
            for body in ["{", "[]", "\"text\"", "{\"bristolType\":}", "nul", String(repeating: "[", count: 5000)] {
                let reply = try await api.send("POST", "/v1/logs", device: device, json: body)
                #expect(reply.status == 400, "\(body.prefix(20))")
                #expect(reply.errorCode == "invalid_json")
            }
            let nul = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4,"notes":"a\u0000b"}"#)
            #expect(nul.status == 400)
            #expect(try await api.send("GET", "/v1/logs?limit=abc", device: device).status == 400)
            #expect(try await api.send("GET", "/v1/logs?limit=500", device: device).status == 400)
            #expect(try await api.send("GET", "/v1/logs?before=garbage", device: device).status == 400)
            #expect(try await api.send("GET", "/v1/logs/not-a-uuid", device: device).status == 400)
            let unknown = try await api.send("GET", "/v1/nothing-here", device: device)
            #expect(unknown.status == 404 && unknown.errorCode == "not_found")
        }
    }

    @Test func everyResponseCarriesARequestIDEchoedOnlyWhenSane() async throws {
        try await TestDatabase.withAPI { api, _ in
            let echoed = try await api.send("GET", "/healthz", headers: ["X-Request-ID": "abc-123.x_y:z"])
            #expect(echoed.header("X-Request-ID") == "abc-123.x_y:z")
            let replaced = try await api.send("GET", "/healthz", headers: ["X-Request-ID": "<script>alert(1)</script>"])
            #expect(replaced.header("X-Request-ID") != nil && replaced.header("X-Request-ID") != "<script>alert(1)</script>")
            let error = try await api.send("GET", "/v1/device")
            #expect(error.header("X-Request-ID")?.isEmpty == false)
            #expect(api.logs.value.contains { $0.contains("request_id=abc-123.x_y:z") && $0.contains("route=/healthz") && $0.contains("status=200") })
        }
    }

    @Test func healthAndMetricsReportTheService() async throws {
        try await TestDatabase.withAPI { api, _ in
            let health = try await api.send("GET", "/healthz")
            #expect(health.status == 200 && health.json?["status"] as? String == "ok")
            _ = try await api.send("GET", "/v1/device", device: UUID())
            // Not on the public port.
            #expect(try await api.send("GET", "/metrics").status == 404)
            let metrics = try await api.metrics()
            #expect(metrics.status == 200)
            #expect(metrics.header("Content-Type")?.hasPrefix("text/plain") == true)
            // Prometheus's conventions (they were broken: hb_requests without _total, a duration without its unit,
            // a 5 ms lowest bucket, 4xx never counted as errors, no HELP, three prefixes, no process metrics).
            let lines = metrics.text.split(separator: "\n")
            var types: [String: String] = [:]
            var helped: Set<String> = []
            for line in lines {
                let words = line.split(separator: " ", maxSplits: 3)
                if words.count >= 4, words[0] == "#", words[1] == "TYPE" { types[String(words[2])] = String(words[3]) }
                if words.count >= 4, words[0] == "#", words[1] == "HELP" { helped.insert(String(words[2])) }
            }
            #expect(types.count >= 10, "\(types)")
            for (name, type) in types {
                #expect(helped.contains(name), "\(name) has no HELP")
                #expect(name.hasPrefix("poopypals_") || name.hasPrefix("process_"), "\(name)")
                if type == "counter" { #expect(name.hasSuffix("_total"), "\(name)") }
                if type == "histogram" { #expect(name.hasSuffix("_seconds"), "\(name)") }
            }
            for name in ["poopypals_http_requests_total", "poopypals_http_request_errors_total", "poopypals_http_request_duration_seconds",
                         "poopypals_db_pool_in_use", "poopypals_db_pool_waiting", "process_cpu_seconds_total", "process_resident_memory_bytes",
                         "process_open_fds", "process_start_time_seconds"] {
                #expect(types[name] != nil, "\(name)")
            }
            // The registry is the process's: tests running beside this one add to the counts.
            #expect(metrics.text.contains(#"poopypals_http_requests_total{method="GET",route="/v1/device",status="404"} "#))
            #expect(metrics.text.contains(#"poopypals_http_request_errors_total{method="GET",route="/v1/device",class="4xx"} "#))
            #expect(metrics.text.contains(#"poopypals_http_request_duration_seconds_bucket{method="GET",route="/v1/device",le="0.0001"}"#))
        }
    }

    @Test func aStoppedDatabaseGives503AndTheSameProcessRecovers() async throws {
        try await TestDatabase.withAPI(poolSize: 2) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let admin = ConnectionPool(configuration: .init(connection: try TestDatabase.serverConfiguration(), maxConnections: 1))
            // The database goes away: no new connections, and the existing ones are cut.
            try await admin.withConnection { conn in
                try conn.executeScript("ALTER DATABASE \(db.name) WITH ALLOW_CONNECTIONS false")
                try conn.query("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = \(db.name)")
            }
            let ready = try await api.send("GET", "/readyz")
            #expect(ready.status == 503)
            #expect(ready.header("Retry-After") == "2")
            #expect(try await api.send("GET", "/healthz").status == 200)  // alive all the same
            let route = try await api.send("GET", "/v1/device", device: device)
            #expect(route.status == 503)
            #expect(route.errorCode == "database_unavailable")
            try await admin.withConnection { try $0.executeScript("ALTER DATABASE \(db.name) WITH ALLOW_CONNECTIONS true") }
            await admin.close()
            #expect(try await api.send("GET", "/readyz").status == 200)
            #expect(try await api.send("GET", "/v1/device", device: device).status == 200)
        }
    }

    /// Every logger of the process (HTTP and data layer) at trace level: no device id, email or token.
    @Test func noDeviceIDEmailOrTokenAppearsInResponsesOrLogs() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            let email = "private.person.\(UInt32.random(in: 0...UInt32.max))@example.com"
            let token = try await api.token(email: email)
            _ = try await api.send("PUT", "/v1/device", device: device)
            let created = try await api.send("PUT", "/v1/profile", device: device, token: token, headers: ["X-Request-ID": "pii-test-1"])
            #expect(created.status == 200)
            let errors = [
                try await api.send("PUT", "/v1/profile", device: UUID(), token: token),
                try await api.send("PUT", "/v1/profile", device: device, token: try await api.token(email: email)),  // email in use
                try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"x","bristolType":4}"#),
                try await api.send("GET", "/v1/logs", headers: ["X-Device-ID": device.uuidString + "x"]),
            ]
            for reply in errors {
                #expect(reply.status >= 400)
                #expect(!reply.text.lowercased().contains(device.uuidString.lowercased()))
                #expect(!reply.text.contains(email))
            }
            let logged = (api.logs.value + CapturedLogs.all).joined(separator: "\n").lowercased()
            #expect(!logged.isEmpty)
            #expect(!logged.contains(device.uuidString.lowercased()))
            #expect(!logged.contains(email))
            #expect(!logged.contains(token.lowercased()))
            // The data layer's lines are there, tied to the request.
            #expect(CapturedLogs.all.contains { $0.contains("poopypals.repo.users") && $0.contains("request_id=pii-test-1") })
        }
    }

    @Test func everyRouteIsInTheOpenAPISpecAndBack() async throws {
        let router = Router(context: APIContext.self)
        let database = Database(pool: ConnectionPool(configuration: .init(connection: .init(connectionString: "postgresql://nobody@127.0.0.1:1/x"))))
        let verifier = try await TokenVerifier(secret: LiveAPI.secret)
        APIRoutes(database: database, tokens: verifier, metrics: APIMetrics.registry).register(on: router)
        let routed = Set(router.routes.map { "\($0.method.rawValue.lowercased()) \($0.path.description.hasPrefix("/") ? "" : "/")\($0.path)" })
        #expect(routed == OpenAPISpec.operations(in: try OpenAPISpec.load()))
        #expect(routed.count == 16)
    }

    @Test func theSpecHasNoKeyWithoutAValue() throws {
        #expect(OpenAPISpec.emptyValues(in: try OpenAPISpec.load()) == [])
    }
}

/// openapi.yaml, parsed by Yams.
enum OpenAPISpec {
    static func load() throws -> [String: Any] {
        let text = try String(contentsOf: TestProject.root.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        guard let spec = try Yams.load(yaml: text) as? [String: Any] else { throw SpecError.notAMapping }
        return spec
    }

    enum SpecError: Error { case notAMapping }

    /// "method /path" for every operation under `paths`.
    static func operations(in spec: [String: Any]) -> Set<String> {
        let methods: Set<String> = ["get", "put", "post", "patch", "delete", "head", "options", "trace"]
        var result: Set<String> = []
        for case let (path, item as [String: Any]) in spec["paths"] as? [String: Any] ?? [:] {
            for method in item.keys where methods.contains(method) { result.insert("\(method) \(path)") }
        }
        return result
    }

    /// Where a mapping holds a key with no value: in a flow mapping (`{ description: a, b }`) an unquoted comma
    /// starts a new key, silently; swift-openapi-generator then refuses the file or drops the field.
    static func emptyValues(in node: Any, at path: String = "") -> [String] {
        switch node {
        case let mapping as [String: Any]:
            return mapping.keys.sorted().flatMap { key -> [String] in
                let value = mapping[key]
                if value == nil || value is NSNull { return ["\(path)/\(key)"] }
                return emptyValues(in: value as Any, at: "\(path)/\(key)")
            }
        case let sequence as [Any]:
            return sequence.enumerated().flatMap { emptyValues(in: $1, at: "\(path)/\($0)") }
        default:
            return []
        }
    }
}
