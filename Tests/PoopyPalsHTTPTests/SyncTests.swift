import Foundation
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import TestSupport

@Suite("Sync: pull and push")
struct SyncTests {
    /// A puller's local copy: id → the log as the server last sent it.
    final class Replica: @unchecked Sendable {
        var logs: [String: [String: String]] = [:]
        var cursor: String?
        var pulls = 0

        /// Pulls until `hasMore` is false.
        func catchUp(_ api: LiveAPI, device: UUID) async throws {
            while true {
                let path = "/v1/sync?limit=7" + (cursor.map { "&cursor=\($0)" } ?? "")
                let reply = try await api.send("GET", path, device: device)
                guard reply.status == 200, let json = reply.json else { throw SetupError("pull answered \(reply.status): \(reply.text)") }
                pulls += 1
                for change in json["changes"] as? [[String: Any]] ?? [] {
                    if change["op"] as? String == "delete", let id = change["id"] as? String {
                        logs[id] = nil
                    } else if let log = change["log"] as? [String: Any], let id = log["id"] as? String {
                        logs[id] = SyncTests.comparable(log)
                    }
                }
                cursor = json["cursor"] as? String
                if json["hasMore"] as? Bool != true { return }
            }
        }
    }

    static func comparable(_ log: [String: Any]) -> [String: String] {
        ["occurredAt": "\(log["occurredAt"] ?? "")", "bristolType": "\(log["bristolType"] ?? "")",
         "notes": "\(log["notes"] ?? "null")", "updatedAt": "\(log["updatedAt"] ?? "")", "version": "\(log["version"] ?? "")"]
    }

    /// The server's logs for `device`, through the list route.
    static func serverLogs(_ api: LiveAPI, device: UUID) async throws -> [String: [String: String]] {
        var logs: [String: [String: String]] = [:]
        var before: String?
        repeat {
            let reply = try await api.send("GET", "/v1/logs?limit=200" + (before.map { "&before=\($0)" } ?? ""), device: device)
            for log in reply.json?["items"] as? [[String: Any]] ?? [] {
                if let id = log["id"] as? String { logs[id] = comparable(log) }
            }
            before = reply.json?["nextCursor"] as? String
        } while before != nil
        return logs
    }

    static func upsert(_ id: String, bristol: Int, notes: String? = nil) -> String {
        let notesJSON = notes.map { "\"\($0)\"" } ?? "null"
        return #"{"op":"upsert","log":{"id":"\#(id)","occurredAt":"2026-11-20T08:00:00Z","bristolType":\#(bristol),"notes":\#(notesJSON)}}"#
    }

    /// Two phones on one device id write concurrently through push and REST while two pullers keep replicas;
    /// after a final pull every replica equals the server, and another device's pull has none of it.
    @Test func twoPhonesOnOneDeviceIDAndTwoPullersConverge() async throws {
        try await TestDatabase.withAPI(poolSize: 6) { api, _ in
            let (device, other) = (UUID(), UUID())
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            #expect(try await api.send("PUT", "/v1/device", device: other).status == 201)
            let otherLog = UUID().uuidString.lowercased()
            _ = try await api.send("POST", "/v1/sync", device: other, json: #"{"operations":[\#(Self.upsert(otherLog, bristol: 2))]}"#)

            let known = Locked<[String]>([])
            let stop = Locked(false)
            let writers = (0..<2).map { phone in
                Task {
                    var generator = SystemRandomNumberGenerator()
                    for step in 0..<40 {
                        let ids = known.value
                        let pick = ids.isEmpty ? nil : ids[Int.random(in: 0..<ids.count, using: &generator)]
                        switch (Int.random(in: 0..<6, using: &generator), pick) {
                        case (0, _), (_, nil):
                            let id = UUID().uuidString.lowercased()
                            let reply = try await api.send("POST", "/v1/sync", device: device,
                                                           json: #"{"operations":[\#(Self.upsert(id, bristol: 4, notes: "p" + String(phone) + "s" + String(step)))]}"#)
                            if reply.status == 200 { known.withLock { $0.append(id) } }
                        case (1, let id?):
                            _ = try await api.send("POST", "/v1/sync", device: device,
                                                   json: #"{"operations":[\#(Self.upsert(id, bristol: 5, notes: "edit p" + String(phone) + "s" + String(step)))]}"#)
                        case (2, let id?):
                            _ = try await api.send("POST", "/v1/sync", device: device, json: #"{"operations":[{"op":"delete","id":"\#(id)"}]}"#)
                        case (3, _):
                            let reply = try await api.send("POST", "/v1/logs", device: device,
                                                           json: #"{"occurredAt":"2026-11-21T08:00:00Z","bristolType":3,"notes":"rest p\#(phone)"}"#)
                            if let id = reply.json?["id"] as? String { known.withLock { $0.append(id) } }
                        case (4, let id?):
                            _ = try await api.send("PATCH", "/v1/logs/\(id)", device: device, json: #"{"notes":"patched p\#(phone)s\#(step)"}"#)
                        case (_, let id?):
                            _ = try await api.send("DELETE", "/v1/logs/\(id)", device: device)
                        }
                    }
                }
            }
            let pullers = (0..<2).map { _ in
                Task { () -> Replica in
                    let replica = Replica()
                    // Pulls while the writers write (a bound far above their time, for a hang).
                    let deadline = ContinuousClock.now + .seconds(600)
                    while !stop.value, ContinuousClock.now < deadline {
                        try await replica.catchUp(api, device: device)
                        try await Task.sleep(for: .milliseconds(15))
                    }
                    return replica
                }
            }
            do {
                for writer in writers { try await writer.value }
            } catch {
                for puller in pullers { puller.cancel() }
                throw error
            }
            stop.withLock { $0 = true }
            let server = try await Self.serverLogs(api, device: device)
            #expect(!server.isEmpty)
            for puller in pullers {
                let replica = try await puller.value
                // The final pull, after the writers stopped: here, not at the pullers' own deadline, which a loaded
                // machine once reached while the writers still wrote (issue 56).
                try await replica.catchUp(api, device: device)
                #expect(replica.pulls > 2)
                #expect(replica.logs == server)
                #expect(replica.logs[otherLog] == nil)
            }
            // Another device's pull holds none of these.
            let foreign = Replica()
            try await foreign.catchUp(api, device: other)
            #expect(Set(foreign.logs.keys) == [otherLog])
        }
    }

    /// Log ids are the device's own (issue 42, item 2, sql/0018): another device's id was a 409 for a create and a
    /// 404 for every other route (an existence oracle), and one squatted id in a 500-operation offline queue stopped
    /// that phone's sync for good. Now it is a free id: the create and the push make this device's own logs.
    @Test func anotherDevicesLogIDIsAFreeIDForCreatesAndPushes() async throws {
        try await TestDatabase.withAPI { api, _ in
            let (owner, other) = (UUID(), UUID())
            for device in [owner, other] { #expect(try await api.send("PUT", "/v1/device", device: device).status == 201) }
            let squatted = UUID().uuidString.lowercased()
            let mine = #"{"id":"\#(squatted)","occurredAt":"2026-11-20T08:00:00Z","bristolType":4,"notes":"owner"}"#
            #expect(try await api.send("POST", "/v1/logs", device: owner, json: mine).status == 201)
            let theirs = try await api.send("POST", "/v1/logs", device: other,
                                            json: #"{"id":"\#(squatted)","occurredAt":"2026-11-21T08:00:00Z","bristolType":6}"#)
            #expect(theirs.status == 201)
            let queue = [Self.upsert(UUID().uuidString.lowercased(), bristol: 1), Self.upsert(squatted, bristol: 6, notes: "pushed"),
                         Self.upsert(UUID().uuidString.lowercased(), bristol: 2)]
            let push = try await api.send("POST", "/v1/sync", device: other, json: #"{"operations":[\#(queue.joined(separator: ","))]}"#)
            #expect(push.status == 200)
            #expect((push.json?["results"] as? [[String: Any]])?.map { $0["status"] as? String } == ["created", "updated", "created"])
            let ownerView = try await api.send("GET", "/v1/logs/\(squatted)", device: owner)
            #expect(ownerView.json?["notes"] as? String == "owner" && ownerView.json?["bristolType"] as? Int == 4)
            #expect(try await api.send("GET", "/v1/logs/\(squatted)", device: other).json?["notes"] as? String == "pushed")
        }
    }

    @Test func aPushReplayedThreeTimesGivesOneResult() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            _ = try await api.send("PUT", "/v1/device", device: device)
            let (a, b, missing) = (UUID().uuidString.lowercased(), UUID().uuidString.lowercased(), UUID().uuidString.lowercased())
            let batch = #"{"operations":[\#(Self.upsert(a, bristol: 4)),\#(Self.upsert(b, bristol: 5, notes: "x")),{"op":"delete","id":"\#(missing)"}]}"#
            var statuses: [[String]] = []
            for _ in 0..<3 {
                let reply = try await api.send("POST", "/v1/sync", device: device, json: batch)
                #expect(reply.status == 200)
                statuses.append((reply.json?["results"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? String })
            }
            #expect(statuses == [["created", "created", "notFound"], ["unchanged", "unchanged", "notFound"], ["unchanged", "unchanged", "notFound"]])
            let replica = Replica()
            try await replica.catchUp(api, device: device)
            #expect(Set(replica.logs.keys) == [a, b])
            // A delete replayed is notFound, never an error.
            for expected in ["deleted", "notFound", "notFound"] {
                let reply = try await api.send("POST", "/v1/sync", device: device, json: #"{"operations":[{"op":"delete","id":"\#(a)"}]}"#)
                #expect((reply.json?["results"] as? [[String: Any]])?.first?["status"] as? String == expected)
            }
        }
    }

    /// The data layer names an operation's own field; the API answers with the field's path in the push's body.
    @Test(arguments: [("bristolType", "operations[2].log.bristolType"), ("notes", "operations[2].log.notes"),
                      ("occurredAt", "operations[2].log.occurredAt"), ("baseVersion", "operations[2].baseVersion")])
    func aBadOperationIsAnsweredWithItsPathInThePush(_ field: String, _ path: String) {
        let error = APIError.from(SyncError.invalidOperation(index: 2, InvalidField(field, "is wrong")))
        #expect(error.status == .badRequest && error.code == "invalid_field")
        #expect(error.message == "\(path): is wrong")
        #expect(APIError.from(SyncError.versionConflict(index: 2)).message.hasPrefix("operations[2]: "))
    }

    @Test func aBatchWithOneBadOperationOrAStaleBaseVersionAppliesNothing() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            _ = try await api.send("PUT", "/v1/device", device: device)
            let good = UUID().uuidString.lowercased()
            let invalid = try await api.send("POST", "/v1/sync", device: device,
                                             json: #"{"operations":[\#(Self.upsert(good, bristol: 4)),\#(Self.upsert(UUID().uuidString, bristol: 9))]}"#)
            #expect(invalid.status == 400)
            #expect(invalid.errorCode == "invalid_field")
            #expect(invalid.text.contains("operations[1].log.bristolType"))
            for body in [#"{"operations":[]}"#, #"{"operations":[{"op":"rename","id":"\#(good)"}]}"#, #"{"ops":[]}"#,
                         #"{"operations":[{"op":"delete"}]}"#] {
                #expect(try await api.send("POST", "/v1/sync", device: device, json: body).status == 400, "\(body)")
            }
            let empty = Replica()
            try await empty.catchUp(api, device: device)
            #expect(empty.logs.isEmpty)

            let created = try await api.send("POST", "/v1/sync", device: device, json: #"{"operations":[\#(Self.upsert(good, bristol: 4))]}"#)
            #expect(created.status == 200)
            let version = try #require(try await api.send("GET", "/v1/logs/\(good)", device: device).json?["version"] as? Int)
            _ = try await api.send("PATCH", "/v1/logs/\(good)", device: device, json: #"{"bristolType":6}"#)  // moves it on
            let fresh = UUID().uuidString.lowercased()
            let stale = try await api.send("POST", "/v1/sync", device: device, json: """
                {"operations":[\(Self.upsert(fresh, bristol: 1)),{"op":"upsert","baseVersion":\(version),"log":{"id":"\(good)","occurredAt":"2026-11-20T08:00:00Z","bristolType":2}}]}
                """)
            #expect(stale.status == 409)
            #expect(stale.errorCode == "version_conflict")
            #expect(try await api.send("GET", "/v1/logs/\(fresh)", device: device).status == 404)  // nothing applied
            #expect(try await api.send("GET", "/v1/logs/\(good)", device: device).json?["bristolType"] as? Int == 6)
        }
    }

    @Test func aCursorOlderThanThePurgedTombstonesIs410() async throws {
        try await TestDatabase.withAPI { api, db in
            let device = UUID()
            _ = try await api.send("PUT", "/v1/device", device: device)
            let id = UUID().uuidString.lowercased()
            _ = try await api.send("POST", "/v1/sync", device: device, json: #"{"operations":[\#(Self.upsert(id, bristol: 4))]}"#)
            let early = Replica()
            try await early.catchUp(api, device: device)
            #expect(early.logs.count == 1)
            #expect(try await api.send("DELETE", "/v1/logs/\(id)", device: device).status == 204)
            // The tombstone is 100 days old by now.
            // One statement at a time: Citus sends a DDL statement's text to the shards, and refuses a text of several.
            try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.executeScript("ALTER TABLE poop_log_tombstones NO FORCE ROW LEVEL SECURITY")
                    try conn.executeScript("UPDATE poop_log_tombstones SET deleted_at = now() - interval '100 days'")
                    try conn.executeScript("ALTER TABLE poop_log_tombstones FORCE ROW LEVEL SECURITY")
                }
            }
            let purge = try await TestProject.run(["maintenance", "--database-url", db.url])
            #expect(purge.status == 0, "\(purge.stderr)")
            #expect(purge.stdout.contains("Purged 1 tombstone older than 90 days on 1 device."))
            // The purged tombstone no longer counts against the device's quota (sql/0014).
            #expect(try await QuotaTests.counts(db, device) == (0, 0))
            let expired = try await api.send("GET", "/v1/sync?cursor=\(try #require(early.cursor))", device: device)
            #expect(expired.status == 410)
            #expect(expired.errorCode == "cursor_expired")
            // From the beginning: the log is simply absent.
            let fresh = Replica()
            try await fresh.catchUp(api, device: device)
            #expect(fresh.logs.isEmpty)
            for bad in ["nonsense", "czF8LTE", String(repeating: "A", count: 200)] {  // "s1|-1"
                #expect(try await api.send("GET", "/v1/sync?cursor=\(bad)", device: device).status == 400, "\(bad)")
            }
            #expect(try await api.send("GET", "/v1/sync?limit=501", device: device).status == 400)
        }
    }

    @Test func aPullOfOnePageIsOneRoundTrip() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let device = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: device)
            let sync = SyncRepository(database: database)
            _ = try await sync.push([.upsert(id: UUID(), occurredAt: Date(), bristolType: 4, notes: nil, baseVersion: nil)], as: device)
            let before = try await database.pool.withConnection { $0.roundTrips }
            let page = try await sync.pull(cursor: nil, limit: 10, as: device)
            #expect(try await database.pool.withConnection { $0.roundTrips } - before == 1)
            #expect(page.changes.count == 1 && !page.hasMore)
        }
    }
}
