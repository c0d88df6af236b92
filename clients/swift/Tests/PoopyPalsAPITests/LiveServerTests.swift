import Foundation
import HTTPTypes
import OpenAPIRuntime
import OpenAPIURLSession
import PoopyPalsAPI
import Testing

/// Every route of openapi.yaml through the client the generator made, as an app would use it: its default
/// configuration and the URLSession transport. Needs a live `poopypals serve` (scripts/client.sh starts one):
/// POOPYPALS_API_URL, and POOPYPALS_API_TOKEN, a token the server accepts (`poopypals dev-token`).
@Suite(.serialized) struct LiveServerTests {
    let client: Client

    init() throws {
        let environment = ProcessInfo.processInfo.environment
        let url = try #require(
            environment["POOPYPALS_API_URL"].flatMap(URL.init(string:)),
            "set POOPYPALS_API_URL to a running `poopypals serve` (scripts/client.sh does)"
        )
        let token = try #require(environment["POOPYPALS_API_TOKEN"], "set POOPYPALS_API_TOKEN (poopypals dev-token)")
        client = Client(serverURL: url, transport: URLSessionTransport(), middlewares: [BearerToken(token: token)])
    }

    /// A new random device id, as the app makes one.
    static func newDevice() -> String { UUID().uuidString.lowercased() }

    @discardableResult
    func register(_ device: String) async throws -> Components.Schemas.Device {
        let info = Components.Schemas.DeviceInfo(model: "iPhone", osVersion: "26.1", appVersion: "1.0",
                                                 buildNumber: "7", isSimulator: false)
        let response = try await client.putDevice(headers: .init(X_hyphen_Device_hyphen_ID: device), body: .json(info))
        return try response.created.body.json
    }

    @Test func healthAndReadiness() async throws {
        #expect(try await client.health().ok.body.json.status == .ok)
        #expect(try await client.ready().ok.body.json.status == .ok)
    }

    @Test func deviceRegistersOnceAndReadsBack() async throws {
        let device = Self.newDevice()
        let created = try await register(device)
        #expect(created.id == device && created.model == "iPhone" && created.isSimulator == false)
        // Every launch registers again: 200, not a second device.
        let again = try await client.putDevice(headers: .init(X_hyphen_Device_hyphen_ID: device), body: nil)
        #expect(try again.ok.body.json.id == device)
        let read = try await client.getDevice(headers: .init(X_hyphen_Device_hyphen_ID: device)).ok.body.json
        #expect(read.createdAt == created.createdAt)
        #expect(read.createdAt.timeIntervalSince1970.rounded() == read.createdAt.timeIntervalSince1970)

        // Unknown device: the documented 404, decoded as the error schema.
        let missing = try await client.getDevice(headers: .init(X_hyphen_Device_hyphen_ID: Self.newDevice()))
        #expect(try missing.notFound.body.json.error.code.isEmpty == false)
    }

    @Test func logsCreateReplayListPatchDelete() async throws {
        let device = Self.newDevice()
        try await register(device)
        let headers = Operations.createLog.Input.Headers(X_hyphen_Device_hyphen_ID: device)
        // Input may carry a fraction; the server stores and answers whole seconds.
        let sent = Date(timeIntervalSince1970: 1_795_000_000.75)
        let new = Components.Schemas.NewLog(id: Self.newDevice(), occurredAt: sent, bristolType: 4, notes: "after coffee")
        let created = try await client.createLog(headers: headers, body: .json(new)).created
        let log = try created.body.json
        #expect(log.occurredAt == Date(timeIntervalSince1970: 1_795_000_000))
        #expect(log.notes == "after coffee" && log.version >= 1)

        // The write's Consistency-Token, sent back, makes the read show it (served by the primary or a standby that
        // has replayed that far); a token the service did not make is the documented 400.
        let token = try #require(created.headers.Consistency_hyphen_Token)
        #expect(token.hasPrefix("c1.") && token.utf8.count == 19)
        let fresh = try await client.getLog(path: .init(id: log.id),
                                            headers: .init(X_hyphen_Device_hyphen_ID: device, Consistency_hyphen_Token: token))
        #expect(try fresh.ok.body.json == log)
        let forged = try await client.listLogs(headers: .init(X_hyphen_Device_hyphen_ID: device, Consistency_hyphen_Token: "c1.forged"))
        #expect(try forged.badRequest.body.json.error.message.contains("Consistency-Token"))

        // What was read, sent back, is the same log: an idempotent replay (200), never a 409.
        let replay = Components.Schemas.NewLog(id: log.id, occurredAt: log.occurredAt, bristolType: log.bristolType,
                                               notes: log.notes)
        let replayed = try await client.createLog(headers: headers, body: .json(replay))
        #expect(try replayed.ok.body.json == log)

        // A bad value is the documented 400 with the error schema.
        let invalid = Components.Schemas.NewLog(occurredAt: sent, bristolType: 9)
        let refused = try await client.createLog(headers: headers, body: .json(invalid))
        #expect(try refused.badRequest.body.json.error.message.isEmpty == false)

        let page = try await client.listLogs(query: .init(limit: 20), headers: .init(X_hyphen_Device_hyphen_ID: device))
        #expect(try page.ok.body.json.items.map(\.id) == [log.id])
        let fetched = try await client.getLog(path: .init(id: log.id), headers: .init(X_hyphen_Device_hyphen_ID: device))
        #expect(try fetched.ok.body.json == log)

        // A generated client leaves nil out of the JSON: "" is how it clears notes.
        let cleared = try await client.patchLog(path: .init(id: log.id), headers: .init(X_hyphen_Device_hyphen_ID: device),
                                                body: .json(.init(notes: "")))
        let afterClear = try cleared.ok.body.json
        #expect(afterClear.notes == nil && afterClear.version > log.version)
        let moved = try await client.patchLog(path: .init(id: log.id), headers: .init(X_hyphen_Device_hyphen_ID: device),
                                              body: .json(.init(bristolType: 3)))
        #expect(try moved.ok.body.json.bristolType == 3)

        let deleted = try await client.deleteLog(path: .init(id: log.id), headers: .init(X_hyphen_Device_hyphen_ID: device))
        _ = try deleted.noContent
        let gone = try await client.getLog(path: .init(id: log.id), headers: .init(X_hyphen_Device_hyphen_ID: device))
        _ = try gone.notFound
    }

    @Test func syncPushThenPullEverything() async throws {
        let device = Self.newDevice()
        try await register(device)
        let kept = Self.newDevice(), removed = Self.newDevice()
        let when = Date(timeIntervalSince1970: 1_795_100_000)
        func upsert(_ id: String, _ type: Int) -> Components.Schemas.SyncOperation {
            .case1(.init(op: .upsert, log: .init(id: id, occurredAt: when, bristolType: type, notes: "synced")))
        }
        let push = Components.Schemas.SyncPush(operations: [
            upsert(kept, 4), upsert(removed, 5), .case2(.init(op: .delete, id: removed)),
        ])
        let results = try await client.pushChanges(headers: .init(X_hyphen_Device_hyphen_ID: device), body: .json(push))
        let pushed = try results.ok
        #expect(try pushed.body.json.results.map(\.id) == [kept, removed, removed])
        let pushToken = try #require(pushed.headers.Consistency_hyphen_Token)

        var cursor: String?
        var upserted: [String: Components.Schemas.Log] = [:]
        var deleted: Set<String> = []
        for _ in 0..<100 {
            let page = try await client.pullChanges(query: .init(cursor: cursor, limit: 1),
                                                    headers: .init(X_hyphen_Device_hyphen_ID: device)).ok.body.json
            for change in page.changes {
                switch change {
                case .case1(let upsert): upserted[upsert.log.id] = upsert.log
                case .case2(let delete): deleted.insert(delete.id); upserted[delete.id] = nil
                }
            }
            cursor = page.cursor
            if !page.hasMore { break }
        }
        #expect(Set(upserted.keys) == [kept])
        #expect(upserted[kept]?.occurredAt == when && upserted[kept]?.notes == "synced")
        #expect(deleted == [removed])

        // The next push carries the puller's cursor and answers the one to pull with: that pull shows the push
        // with no header; with the previous push's token as well, the same.
        let next = Self.newDevice()
        let more = try await client.pushChanges(headers: .init(X_hyphen_Device_hyphen_ID: device),
                                                body: .json(.init(operations: [upsert(next, 2)], cursor: cursor))).ok
        #expect(try more.headers.Consistency_hyphen_Token.map { $0 > pushToken } == true)
        let after = try await client.pullChanges(query: .init(cursor: try more.body.json.cursor),
                                                 headers: .init(X_hyphen_Device_hyphen_ID: device,
                                                                Consistency_hyphen_Token: pushToken)).ok.body.json
        #expect(after.changes.count == 1 && !after.hasMore)
        if case .case1(let upsert)? = after.changes.first { #expect(upsert.log.id == next) } else { Issue.record("not the upsert pushed") }
    }

    @Test func profileExportRotationAndErasure() async throws {
        let device = Self.newDevice()
        try await register(device)
        let profile = try await client.putProfile(headers: .init(X_hyphen_Device_hyphen_ID: device),
                                                  body: .json(.init(fullName: "Client Check", dateOfBirth: "1990-05-17")))
        let user = try profile.ok.body.json.user
        #expect(user.fullName == "Client Check" && user.dateOfBirth == "1990-05-17")
        let read = try await client.getProfile(headers: .init(X_hyphen_Device_hyphen_ID: device)).ok.body.json
        #expect(read.user.id == user.id && read.device?.id == device)

        let log = Components.Schemas.NewLog(occurredAt: Date(timeIntervalSince1970: 1_795_200_000), bristolType: 2)
        _ = try await client.createLog(headers: .init(X_hyphen_Device_hyphen_ID: device), body: .json(log)).created

        let export = try await client.exportDevice(headers: .init(X_hyphen_Device_hyphen_ID: device)).ok.body.json
        #expect(export.device.id == device && export.profile?.id == user.id && export.logs.count == 1)
        // A device without a profile: the field is absent, which the generated type reads as nil.
        let alone = Self.newDevice()
        try await register(alone)
        let aloneExport = try await client.exportDevice(headers: .init(X_hyphen_Device_hyphen_ID: alone)).ok.body.json
        #expect(aloneExport.profile == nil && aloneExport.logs.isEmpty)

        let next = Self.newDevice()
        let rotated = try await client.rotateDevice(headers: .init(X_hyphen_Device_hyphen_ID: device),
                                                    body: .json(.init(newDeviceId: next)))
        #expect(try rotated.ok.body.json.id == next)
        _ = try await client.getDevice(headers: .init(X_hyphen_Device_hyphen_ID: device)).notFound
        let moved = try await client.listLogs(headers: .init(X_hyphen_Device_hyphen_ID: next)).ok.body.json
        #expect(moved.items.count == 1)
        // Rotating onto an id in use is the documented 409.
        let taken = try await client.rotateDevice(headers: .init(X_hyphen_Device_hyphen_ID: next),
                                                  body: .json(.init(newDeviceId: alone)))
        #expect(try taken.conflict.body.json.error.code == "device_id_in_use")

        _ = try await client.eraseDevice(headers: .init(X_hyphen_Device_hyphen_ID: next)).noContent
        _ = try await client.getDevice(headers: .init(X_hyphen_Device_hyphen_ID: next)).notFound
        _ = try await client.eraseDevice(headers: .init(X_hyphen_Device_hyphen_ID: alone)).noContent
    }
}

/// The spec's bearer scheme, as the generator leaves it to the app: a middleware adding the header.
struct BearerToken: ClientMiddleware {
    let token: String

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(token)"
        return try await next(request, body, baseURL)
    }
}
