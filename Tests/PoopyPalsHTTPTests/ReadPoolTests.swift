import Foundation
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import TestSupport

/// Reads on a read pool (`POOPYPALS_READ_DATABASE_URL`) that never show a phone less than it wrote. A real standby
/// with a delayed replay is exercised by scripts/readscale.py on the cluster; here the read pool is the primary
/// itself, which is always fresh: what is pinned is the token's life cycle and its validation.
@Suite("Reads on a read pool, with Consistency-Token")
struct ReadPoolTests {
    @Test func theTokenIsOpaqueAndTamperingIsRefused() throws {
        let token = try #require(ConsistencyToken(lsn: "16/B374D848"))
        #expect(token.lsn == "16/B374D848")
        #expect(try ConsistencyToken(encoded: token.encoded) == token)
        #expect(ConsistencyToken(lsn: "0/0")?.position == 0)
        #expect(ConsistencyToken(lsn: "FFFFFFFF/FFFFFFFF")?.position == UInt64.max)
        for bad in ["", "1", "1/", "/1", "123456789/0", "g/0", "1/2/3", "+1/0", " 1/0", "１/0"] {
            #expect(ConsistencyToken(lsn: bad) == nil, "\(bad)")
        }
        #expect(token.encoded == "c1.00000016b374d848")
        #expect(try ConsistencyToken(encoded: "c1.ffffffffffffffff").position == UInt64.max)
        for bad in ["garbage", "c2.0000000000000001", "c1.000000000000001", "c1.00000000000000001", "c1.000000000000000g",
                    "C1.0000000000000001", "c1.000000000000000A", "c1.+00000000000001", "c1.0000000000000001 ", "c1|0/1",
                    String(repeating: "A", count: 65)] {
            #expect(throws: InvalidField.self, "\(bad)") { try ConsistencyToken(encoded: bad) }
        }
    }

    /// Not on a Citus coordinator, where there is no token by design (`onCitusWritesAnswerNoTokenAndEveryReadSeesThem`).
    static let tokensAreMade = TestEnvironment.extensionInEveryDatabase != "citus"

    @Test(.enabled(if: tokensAreMade, "on Citus: onCitusWritesAnswerNoTokenAndEveryReadSeesThem"))
    func writesAnswerATokenAndReadsThatSendItBackAreServed() async throws {
        try await TestDatabase.withAPI(poolSize: 2, configure: { $0.readDatabase = $0.database }) { api, _ in
            let device = UUID()
            let registered = try await api.send("PUT", "/v1/device", device: device)
            #expect(registered.status == 201)
            let first = try ConsistencyToken(encoded: try #require(registered.header("Consistency-Token")))
            let created = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#)
            #expect(created.status == 201)
            let tokenText = try #require(created.header("Consistency-Token"))
            #expect(try ConsistencyToken(encoded: tokenText) > first)  // the WAL moved on
            let id = try #require(created.json?["id"] as? String)
            for path in ["/v1/logs/\(id)", "/v1/logs", "/v1/device", "/v1/sync", "/v1/export"] {
                let read = try await api.send("GET", path, device: device, headers: ["Consistency-Token": tokenText])
                #expect(read.status == 200, "\(path): \(read.text)")
                #expect(read.text.contains(id) || path == "/v1/device", "\(path)")
                #expect(read.header("Consistency-Token") == nil, "\(path): a read commits nothing")
                let tampered = try await api.send("GET", path, device: device, headers: ["Consistency-Token": "garbage"])
                #expect(tampered.status == 400, "\(path)")
                #expect(tampered.errorCode == "invalid_field")
                #expect(tampered.text.contains("Consistency-Token"))
            }
            // A refused write commits nothing and carries no token.
            let refused = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":9}"#)
            #expect(refused.status == 400)
            #expect(refused.header("Consistency-Token") == nil)
        }
    }

    /// The service's read pool runs on the request pool's threads (where every HTTP connection runs): a read's
    /// body runs inline, as a write's does, instead of being handed to another thread and back.
    @Test func theReadPoolRunsOnTheRequestPoolsThreads() async throws {
        try await TestDatabase.with { db in
            var configuration = APIConfiguration(jwtSecret: String(repeating: "s", count: 32), database: db.configuration)
            configuration.readDatabase = db.configuration
            let pools = APIPools(configuration)
            let reads = try #require(pools.reads)
            let (outer, inner) = try await withTaskExecutorPreference(pools.requests.taskExecutor()) {
                (pthread_self(), try await reads.withConnection { _ in pthread_self() })
            }
            #expect(pthread_equal(outer, inner) != 0)
            await pools.close()
        }
    }

    /// On a Citus coordinator (make test's suites there) a write's position is per worker: with a read pool configured,
    /// writes answer no token, pushes answer cursors without a position, and reads (with a token or not) run on the
    /// primary and see the write (docs/scaling.md). The data layer's side, with a read pool that would answer
    /// wrongly, is CitusTests…noWriteCarriesATokenAndNoReadGoesToTheReadPool.
    @Test(.enabled(if: !tokensAreMade, "only on a Citus coordinator"))
    func onCitusWritesAnswerNoTokenAndEveryReadSeesThem() async throws {
        try await TestDatabase.withAPI(poolSize: 2, configure: { $0.readDatabase = $0.database }) { api, _ in
            let device = UUID()
            let registered = try await api.send("PUT", "/v1/device", device: device)
            #expect(registered.status == 201)
            #expect(registered.header("Consistency-Token") == nil)
            let created = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#)
            #expect(created.status == 201)
            #expect(created.header("Consistency-Token") == nil)
            let id = try #require(created.json?["id"] as? String)
            let pushed = try await api.send("POST", "/v1/sync", device: device, json: Self.push(UUID()))
            #expect(pushed.status == 200)
            #expect(pushed.header("Consistency-Token") == nil)
            #expect(try SyncCursor(encoded: try #require(pushed.json?["cursor"] as? String)).position == nil)
            // A token from elsewhere (a client that kept one) is still validated, and changes nothing.
            for path in ["/v1/logs/\(id)", "/v1/logs", "/v1/sync", "/v1/export"] {
                let read = try await api.send("GET", path, device: device, headers: ["Consistency-Token": "c1.0000000000000001"])
                #expect(read.status == 200, "\(path): \(read.text)")
                #expect(read.text.contains(id), "\(path)")
                #expect(try await api.send("GET", path, device: device, headers: ["Consistency-Token": "garbage"]).status == 400, "\(path)")
            }
        }
    }

    @Test func withoutAReadPoolThereIsNoToken() async throws {
        try await TestDatabase.withAPI(poolSize: 1) { api, _ in
            let device = UUID()
            let registered = try await api.send("PUT", "/v1/device", device: device)
            #expect(registered.status == 201)
            #expect(registered.header("Consistency-Token") == nil)
            // A push still answers the cursor to pull with: the beginning, with no position to wait for.
            let pushed = try await api.send("POST", "/v1/sync", device: device, json: Self.push(UUID()))
            #expect(pushed.status == 200)
            #expect(try SyncCursor(encoded: try #require(pushed.json?["cursor"] as? String)) == SyncCursor(sequence: 0))
        }
    }

    /// A push of one upsert per id, with `cursor` when given.
    static func push(_ ids: UUID..., cursor: String? = nil) -> String {
        let logs = ids.map { #"{"op":"upsert","log":{"id":"\#($0.uuidString.lowercased())","occurredAt":"2026-11-20T08:00:00Z","bristolType":4}}"# }
        return #"{"operations":[\#(logs.joined(separator: ","))]\#(cursor.map { #","cursor":"\#($0)""# } ?? "")}"#
    }

    /// Push-then-pull sees the push with no header: the push answers the puller's cursor carrying its commit
    /// position; a pull keeps the position on while there are more pages and drops it at the end.
    @Test(.enabled(if: tokensAreMade, "on Citus: onCitusWritesAnswerNoTokenAndEveryReadSeesThem"))
    func aPushAnswersACursorCarryingItsPositionUntilThePullReachesTheEnd() async throws {
        try await TestDatabase.withAPI(poolSize: 2, configure: { $0.readDatabase = $0.database }) { api, _ in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let (a, b, c) = (UUID(), UUID(), UUID())
            let first = try await api.send("POST", "/v1/sync", device: device, json: Self.push(a, b, c))
            #expect(first.status == 200, "\(first.text)")
            let token = try ConsistencyToken(encoded: try #require(first.header("Consistency-Token")))
            let fromPush = try SyncCursor(encoded: try #require(first.json?["cursor"] as? String))
            #expect(fromPush == SyncCursor(sequence: 0, position: token))

            func pull(_ cursor: String, limit: Int) async throws -> (ids: [String], cursor: SyncCursor, text: String, more: Bool) {
                let reply = try await api.send("GET", "/v1/sync?limit=\(limit)&cursor=\(cursor)", device: device)
                #expect(reply.status == 200, "\(reply.text)")
                let changes = reply.json?["changes"] as? [[String: Any]] ?? []
                let text = try #require(reply.json?["cursor"] as? String)
                return (changes.compactMap { ($0["log"] as? [String: Any])?["id"] as? String }, try SyncCursor(encoded: text), text,
                        reply.json?["hasMore"] as? Bool ?? false)
            }
            let page = try await pull(fromPush.encoded, limit: 1)
            #expect(page.ids == [a.uuidString.lowercased()] && page.more)
            #expect(page.cursor.position == token && page.cursor.sequence > 0)  // more to come: still carried
            let rest = try await pull(page.text, limit: 500)
            #expect(rest.ids == [b, c].map { $0.uuidString.lowercased() } && !rest.more)
            #expect(rest.cursor.position == nil)  // everything up to it seen: dropped

            // A push continuing from that cursor keeps its place and carries the new position; pulling with it shows
            // the push and nothing before it.
            let d = UUID()
            let second = try await api.send("POST", "/v1/sync", device: device, json: Self.push(d, cursor: rest.text))
            #expect(second.status == 200, "\(second.text)")
            let secondToken = try ConsistencyToken(encoded: try #require(second.header("Consistency-Token")))
            #expect(secondToken > token)
            let continued = try SyncCursor(encoded: try #require(second.json?["cursor"] as? String))
            #expect(continued == SyncCursor(sequence: rest.cursor.sequence, position: secondToken))
            #expect(try await pull(continued.encoded, limit: 500).ids == [d.uuidString.lowercased()])

            // A cursor this service did not make is a 400 naming it, and the batch is not applied.
            let e = UUID()
            for bad in ["garbage", Base64URL.encode(Array("s2|0|0000000000000001x".utf8)), String(repeating: "A", count: 65)] {
                let refused = try await api.send("POST", "/v1/sync", device: device, json: Self.push(e, cursor: bad))
                #expect(refused.status == 400 && refused.errorCode == "invalid_field", "\(bad): \(refused.text)")
                #expect(refused.text.contains("cursor") && refused.header("Consistency-Token") == nil)
            }
            #expect(try await api.send("GET", "/v1/logs/\(e.uuidString.lowercased())", device: device).status == 404)
            // null is no cursor: the beginning.
            let null = try await api.send("POST", "/v1/sync", device: device,
                                          json: #"{"operations":[{"op":"delete","id":"\#(e.uuidString.lowercased())"}],"cursor":null}"#)
            #expect(try SyncCursor(encoded: try #require(null.json?["cursor"] as? String)).sequence == 0)
        }
    }

    /// The service keeps nothing between requests: two instances behind one PgBouncer (transaction pooling) store
    /// each of 200 writes spread over both exactly once, and either reads back all of them.
    @Test(.enabled(if: TestEnvironment.hasPgBouncer, "needs PGBOUNCER_URL"))
    func twoInstancesBehindOnePgBouncerStoreEveryWriteOnceAndReadAll() async throws {
        try await TestDatabase.withMigrated { db in
            let bouncer = try db.throughPgBouncer
            let first = try await LiveAPI.start(bouncer.configuration, poolSize: 2)
            let second = try await LiveAPI.start(bouncer.configuration, poolSize: 2)
            let instances = [first, second]
            let device = UUID()
            #expect(try await first.send("PUT", "/v1/device", device: device).status == 201)
            #expect(try await second.send("PUT", "/v1/device", device: device).status == 200)
            let ids = (0..<200).map { _ in UUID().uuidString.lowercased() }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for (index, id) in ids.enumerated() {
                    group.addTask {
                        let body = #"{"id":"\#(id)","occurredAt":"2026-11-20T08:00:00Z","bristolType":\#(index % 7 + 1)}"#
                        return try await instances[index % 2].send("POST", "/v1/logs", device: device, json: body).status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == 201 })
            // A replay through the other instance is recognised, not stored twice.
            let replay = try await second.send("POST", "/v1/logs", device: device,
                                               json: #"{"id":"\#(ids[0])","occurredAt":"2026-11-20T08:00:00Z","bristolType":1}"#)
            #expect(replay.status == 200)
            for api in instances {
                let page = try await api.send("GET", "/v1/logs?limit=200", device: device)
                let listed = (page.json?["items"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
                #expect(listed.count == 200 && Set(listed) == Set(ids))
            }
            let stored = try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('role', poopypals_service_role(), true), set_config('app.device_id', poopypals_device_key(\(device))::text, true)")
                    return try conn.query("SELECT count(*)::int FROM poop_logs")[0].decode(0, as: Int.self)
                }
            }
            #expect(stored == 200)
            await first.stop()
            await second.stop()
        }
    }
}
