import Foundation
import PoopyPalsData
@testable import PoopyPalsHTTP
import Testing
import TestSupport

/// What one device may store (issue 41, sql/0014): live logs and tombstones, counted by the database on the device
/// row, so that every instance shares them. Nothing bounded it: 43 000 logs for one device in 55 s.
@Suite("Device quotas")
struct QuotaTests {
    static func log(_ id: UUID = UUID(), bristol: Int = 4) -> String {
        #"{"id":"\#(id.uuidString)","occurredAt":"2026-11-20T08:00:00Z","bristolType":\#(bristol)}"#
    }

    static func upserts(_ count: Int) -> String {
        let operations = (0..<count).map { _ in #"{"op":"upsert","log":\#(log())}"# }
        return #"{"operations":[\#(operations.joined(separator: ","))]}"#
    }

    /// The device row's counts, read as the device (the owner sees nothing without it: row-level security is forced).
    static func counts(_ db: TestDatabase, _ device: UUID) async throws -> (logs: Int, tombstones: Int) {
        try await db.withConnection { conn in
            try conn.transaction { conn in
                try TestDatabase.setDevice(device.deviceKey, on: conn)
                let row = try conn.query("SELECT log_count, tombstone_count FROM devices WHERE key = \(device.deviceKey)")[0]
                return (try row.decode("log_count", as: Int.self), try row.decode("tombstone_count", as: Int.self))
            }
        }
    }

    @Test func aDeviceAtItsLogQuotaIsRefusedWholeAndCanWriteAgainAfterDeleting() async throws {
        try await TestDatabase.withAPI(configure: { $0.quotas = DeviceQuotas(maxLogs: 5, maxTombstones: 100) }) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            #expect(try await api.send("POST", "/v1/sync", device: device, json: Self.upserts(3)).status == 200)
            // A batch that would cross the quota: refused whole, nothing of it stored.
            let batch = try await api.send("POST", "/v1/sync", device: device, json: Self.upserts(3))
            #expect(batch.status == 409)
            #expect(batch.errorCode == "quota_exceeded")
            #expect(batch.text.contains("5 logs"), "\(batch.text)")
            #expect(try await Self.counts(db, device).logs == 3)
            let first = UUID(), second = UUID()
            #expect(try await api.send("POST", "/v1/logs", device: device, json: Self.log(first)).status == 201)
            #expect(try await api.send("POST", "/v1/logs", device: device, json: Self.log(second)).status == 201)
            // Replays of a create are recognised and count nothing.
            for _ in 0..<3 { #expect(try await api.send("POST", "/v1/logs", device: device, json: Self.log(second)).status == 200) }
            let over = try await api.send("POST", "/v1/logs", device: device, json: Self.log())
            #expect(over.status == 409)
            #expect(over.errorCode == "quota_exceeded")
            let list = try await api.send("GET", "/v1/logs?limit=50", device: device)
            #expect((list.json?["items"] as? [Any])?.count == 5)
            #expect(try await Self.counts(db, device) == (5, 0))
            // Another device is not affected by this one's quota.
            let other = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: other).status == 201)
            #expect(try await api.send("POST", "/v1/logs", device: other, json: Self.log()).status == 201)
            // Deleting makes room.
            #expect(try await api.send("DELETE", "/v1/logs/\(first.uuidString)", device: device).status == 204)
            #expect(try await api.send("POST", "/v1/logs", device: device, json: Self.log()).status == 201)
            #expect(try await Self.counts(db, device) == (5, 1))
        }
    }

    @Test func aDeviceAtItsTombstoneQuotaCannotDeleteMoreAndKeepsTheLog() async throws {
        try await TestDatabase.withAPI(configure: { $0.quotas = DeviceQuotas(maxLogs: 100, maxTombstones: 2) }) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let ids = (0..<3).map { _ in UUID() }
            for id in ids { #expect(try await api.send("POST", "/v1/logs", device: device, json: Self.log(id)).status == 201) }
            #expect(try await api.send("DELETE", "/v1/logs/\(ids[0].uuidString)", device: device).status == 204)
            #expect(try await api.send("DELETE", "/v1/logs/\(ids[1].uuidString)", device: device).status == 204)
            let refused = try await api.send("DELETE", "/v1/logs/\(ids[2].uuidString)", device: device)
            #expect(refused.status == 409)
            #expect(refused.errorCode == "quota_exceeded")
            #expect(try await api.send("GET", "/v1/logs/\(ids[2].uuidString)", device: device).status == 200)
            #expect(try await Self.counts(db, device) == (1, 2))
            // Re-creating a deleted id removes its tombstone, and the count follows.
            #expect(try await api.send("POST", "/v1/logs", device: device, json: Self.log(ids[0])).status == 201)
            #expect(try await Self.counts(db, device) == (2, 1))
            #expect(try await api.send("DELETE", "/v1/logs/\(ids[2].uuidString)", device: device).status == 204)
        }
    }

    /// A create refused because another device held the id used to delete the first device's tombstone of it (a row
    /// trigger before the insert, which ON CONFLICT then skipped), committed with the 409: the first device's other
    /// phone never learned of the delete (issue 42, item 8). sql/0014 removes a tombstone only for a row really
    /// inserted, and since sql/0018 another device's id is a free id, so that create is no longer refused at all.
    /// Either way the other phone sees the delete, and then the log's return.
    @Test func anotherDevicesCreateOfTheSameIDKeepsTheTombstoneOfTheDelete() async throws {
        try await TestDatabase.withAPI { api, db in
            let (first, second) = (UUID(), UUID())
            for device in [first, second] { #expect(try await api.send("PUT", "/v1/device", device: device).status == 201) }
            let id = UUID()
            #expect(try await api.send("POST", "/v1/logs", device: first, json: Self.log(id)).status == 201)
            let pulled = try await api.send("GET", "/v1/sync", device: first)
            let cursor = try #require(pulled.json?["cursor"] as? String)
            #expect(try await api.send("DELETE", "/v1/logs/\(id.uuidString)", device: first).status == 204)
            #expect(try await api.send("POST", "/v1/logs", device: second, json: Self.log(id)).status == 201)
            let next = try await api.send("GET", "/v1/sync?cursor=\(cursor)", device: first)
            let changes = try #require(next.json?["changes"] as? [[String: Any]])
            #expect(changes.contains { $0["op"] as? String == "delete" && ($0["id"] as? String)?.lowercased() == id.uuidString.lowercased() },
                    "\(changes)")
            #expect(try await Self.counts(db, first) == (0, 1))
            // The first device makes it again: the tombstone goes, and the other phone sees the log come back.
            #expect(try await api.send("POST", "/v1/logs", device: first, json: Self.log(id, bristol: 5)).status == 201)
            #expect(try await Self.counts(db, first) == (1, 0))
            let later = try await api.send("GET", "/v1/sync?cursor=\(cursor)", device: first)
            let after = try #require(later.json?["changes"] as? [[String: Any]])
            #expect(after.contains { $0["op"] as? String == "upsert" })
        }
    }
}
