import Foundation
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import TestSupport

@Suite("Device and log routes")
struct RouteTests {
    @Test func deviceRegistersThenUpdatesAndReads() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("GET", "/v1/device", device: device).status == 404)
            let created = try await api.send("PUT", "/v1/device", device: device, json: #"{"model":"iPhone15,2","osVersion":"18.1"}"#)
            #expect(created.status == 201)
            #expect(created.json?["id"] as? String == device.uuidString.lowercased())
            let updated = try await api.send("PUT", "/v1/device", device: device, json: #"{"model":"iPhone15,2","osVersion":"18.2","isSimulator":true}"#)
            #expect(updated.status == 200)
            let read = try await api.send("GET", "/v1/device", device: device)
            #expect(read.status == 200)
            #expect(read.json?["osVersion"] as? String == "18.2")
            #expect(read.json?["isSimulator"] as? Bool == true)
            #expect(try await api.send("PUT", "/v1/device", device: UUID()).status == 201)  // empty body is fine
        }
    }

    @Test func logsCreateReplayConflictListPatchDelete() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            _ = try await api.send("PUT", "/v1/device", device: device)
            let id = UUID().uuidString.lowercased()
            let upload = #"{"id":"\#(id)","occurredAt":"2026-11-20T08:30:00.123456Z","bristolType":4,"notes":"coffee"}"#
            let created = try await api.send("POST", "/v1/logs", device: device, json: upload)
            #expect(created.status == 201)
            #expect(created.json?["occurredAt"] as? String == "2026-11-20T08:30:00Z")  // stored and written to the whole second
            let replay = try await api.send("POST", "/v1/logs", device: device, json: upload)
            #expect(replay.status == 200)
            #expect(replay.json?["id"] as? String == id)
            let other = try await api.send("POST", "/v1/logs", device: device, json: upload.replacingOccurrences(of: "\"bristolType\":4", with: "\"bristolType\":5"))
            #expect(other.status == 409)
            #expect(other.errorCode == "log_id_in_use")

            for hour in 10...12 {
                #expect(try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T\#(hour):00:00Z","bristolType":3}"#).status == 201)
            }
            let first = try await api.send("GET", "/v1/logs?limit=3", device: device)
            let items = first.json?["items"] as? [[String: Any]]
            #expect(items?.map { $0["occurredAt"] as? String } == ["2026-11-20T12:00:00Z", "2026-11-20T11:00:00Z", "2026-11-20T10:00:00Z"])
            let cursor = try #require(first.json?["nextCursor"] as? String)
            let second = try await api.send("GET", "/v1/logs?limit=3&before=\(cursor)", device: device)
            #expect((second.json?["items"] as? [[String: Any]])?.map { $0["id"] as? String } == [id])
            #expect(second.json?["nextCursor"] is NSNull)

            let patched = try await api.send("PATCH", "/v1/logs/\(id)", device: device, json: #"{"bristolType":6,"notes":null}"#)
            #expect(patched.status == 200)
            #expect(patched.json?["bristolType"] as? Int == 6)
            #expect(patched.json?["notes"] is NSNull)
            #expect(try await api.send("GET", "/v1/logs/\(id)", device: device).json?["bristolType"] as? Int == 6)
            #expect(try await api.send("DELETE", "/v1/logs/\(id)", device: device).status == 204)
            #expect(try await api.send("GET", "/v1/logs/\(id)", device: device).status == 404)
        }
    }

    @Test func twoDevicesCannotSeeOrChangeEachOthersLogsThroughAnyRoute() async throws {
        try await TestDatabase.withAPI { api, _ in
            let (owner, intruder) = (UUID(), UUID())
            for device in [owner, intruder] { _ = try await api.send("PUT", "/v1/device", device: device) }
            let created = try await api.send("POST", "/v1/logs", device: owner, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":2}"#)
            let id = try #require(created.json?["id"] as? String)
            let missing = UUID().uuidString.lowercased()
            for target in [id, missing] {
                let get = try await api.send("GET", "/v1/logs/\(target)", device: intruder)
                let patch = try await api.send("PATCH", "/v1/logs/\(target)", device: intruder, json: #"{"bristolType":7}"#)
                let delete = try await api.send("DELETE", "/v1/logs/\(target)", device: intruder)
                #expect([get.status, patch.status, delete.status] as [Int] == [404, 404, 404])
                // Exactly like a missing one: same body too.
                #expect(get.errorCode == "not_found" && patch.errorCode == "not_found" && delete.errorCode == "not_found")
            }
            #expect((try await api.send("GET", "/v1/logs", device: intruder).json?["items"] as? [Any])?.isEmpty == true)
            let untouched = try await api.send("GET", "/v1/logs/\(id)", device: owner)
            #expect(untouched.json?["bristolType"] as? Int == 2)
        }
    }

    /// Nulls and integers as openapi.yaml states them (schemathesis found both once it reached the logic): a PATCH
    /// cannot null a field every log has (it was taken as "unchanged"), an optional create id may be null (the server
    /// picks one), and an integer past 2^53 - 1 is refused, since JSON numbers are read as doubles and would round.
    @Test func nullsAndLargeIntegersAreWhatTheSpecSays() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let created = try await api.send("POST", "/v1/logs", device: device,
                                             json: #"{"id":null,"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#)
            #expect(created.status == 201)
            let id = try #require(created.json?["id"] as? String)
            for body in [#"{"bristolType":null}"#, #"{"occurredAt":null}"#, #"{"bristolType":null,"notes":"x"}"#] {
                let reply = try await api.send("PATCH", "/v1/logs/\(id)", device: device, json: body)
                #expect(reply.status == 400, "\(body)")
                #expect(reply.errorCode == "invalid_field", "\(body)")
            }
            #expect(try await api.send("GET", "/v1/logs/\(id)", device: device).json?["notes"] is NSNull)
            func push(_ baseVersion: String) async throws -> LiveAPI.Reply {
                try await api.send("POST", "/v1/sync", device: device, json: """
                    {"operations":[{"op":"upsert","baseVersion":\(baseVersion),"log":{"id":"\(UUID())","occurredAt":"2026-11-20T08:00:00Z","bristolType":4}}]}
                    """)
            }
            #expect(try await push("9007199254740991").status == 409)  // the largest exact one: a version that does not match
            for tooLarge in ["9007199254740993", "9223372036854775807", "1e300", "-1"] {
                let reply = try await push(tooLarge)
                #expect(reply.status == 400, "\(tooLarge)")
                #expect(reply.text.contains("baseVersion"), "\(tooLarge)")
            }
        }
    }

    @Test(arguments: [
        (#"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":9}"#, "bristolType"),
        (#"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":"4"}"#, "bristolType"),
        (#"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":true}"#, "bristolType"),
        (#"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4.5}"#, "bristolType"),
        (#"{"occurredAt":"yesterday","bristolType":4}"#, "occurredAt"),
        (#"{"occurredAt":"2026-11-20T08:00:00","bristolType":4}"#, "occurredAt"),
        (#"{"occurredAt":"2999-01-01T00:00:00Z","bristolType":4}"#, "occurredAt"),
        (#"{"bristolType":4}"#, "occurredAt"),
        (#"{"occurredAt":"2026-11-20T08:00:00Z"}"#, "bristolType"),
        (#"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4,"notes":42}"#, "notes"),
        (#"{"id":"not-a-uuid","occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#, "id"),
        // 36 characters that Foundation's sscanf-based parser took for UUIDs (…2e03 and …6f0c…).
        (#"{"id":" 6f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3","occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#, "id"),
        (#"{"id":"+f1c0a4e-3b2d-4c5e-9f70-8a9b0c1d2e3f","occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#, "id"),
        (#"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4,"createdAt":"2020-01-01T00:00:00Z"}"#, "createdAt"),
        (#"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4,"deviceId":"6f1c0a4e-0000-4000-8000-000000000001"}"#, "deviceId"),
        (#"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4,"mood":"happy"}"#, "mood"),
    ])
    func badFieldsAre400NamingTheField(_ json: String, _ field: String) async throws {
        try await TestDatabase.withAPI { api, db in
            let device = UUID()
            _ = try await api.send("PUT", "/v1/device", device: device)
            let reply = try await api.send("POST", "/v1/logs", device: device, json: json)
            #expect(reply.status == 400)
            #expect(reply.errorCode == "invalid_field")
            #expect((reply.json?["error"] as? [String: Any])?["message"] as? String ?? "" ~= field)
            let count = try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.executeScript("ALTER TABLE poop_logs NO FORCE ROW LEVEL SECURITY")
                    defer { _ = try? conn.executeScript("ALTER TABLE poop_logs FORCE ROW LEVEL SECURITY") }
                    return try conn.query("SELECT count(*)::int FROM poop_logs")[0].decode(0, as: Int.self)
                }
            }
            #expect(count == 0)
        }
    }
}

private func ~= (message: String, field: String) -> Bool { message.hasPrefix(field + ":") }
