import Crypto
import Foundation
import NIOCore
import PoopyPalsData
@testable import PoopyPalsHTTP
import Testing
import TestSupport

/// Rate limits kept in the database (issue 41, sql/0015), so that every instance shares them: log writes per device
/// and registrations per client network. Nothing limited either: 43 000 logs in 55 s, any number of devices.
@Suite("Rate limits")
struct RateLimitTests {
    @Test func aDeviceWritingFasterThanItsBucketGets429WithTheHeadersAndNothingStored() async throws {
        try await TestDatabase.withAPI(configure: { $0.rates = RateLimits(writeBurst: 500, writesPerSecond: 1) }) { api, _ in
            let device = UUID(), other = UUID()
            for phone in [device, other] { #expect(try await api.send("PUT", "/v1/device", device: phone).status == 201) }
            let started = ContinuousClock.now
            #expect(try await api.send("POST", "/v1/sync", device: device, json: QuotaTests.upserts(500)).status == 200)
            // The bucket is empty now, but regains a token a second: on a loaded machine a few may come back
            // before the next write, never more than the seconds that passed.
            var extra = 0
            var refusal: HTTPReply?
            for _ in 0..<100 {
                let reply = try await api.send("POST", "/v1/logs", device: device, json: QuotaTests.log())
                if reply.status == 429 { refusal = reply; break }
                #expect(reply.status == 201)
                extra += 1
            }
            let limited = try #require(refusal)
            let seconds = (ContinuousClock.now - started).components.seconds
            #expect(extra <= seconds + 1, "\(extra) writes past the bucket in \(seconds) s")
            #expect(limited.errorCode == "rate_limited")
            let wait = try #require(limited.header("Retry-After").flatMap(Int.init))
            #expect(wait >= 1 && wait <= 2, "Retry-After \(wait)")
            #expect(limited.header("RateLimit-Policy") == #""device-writes";q=500;w=500"#)
            #expect(limited.header("RateLimit") == #""device-writes";r=0;t=\#(wait)"#)
            // A push past the bucket is refused whole.
            let push = try await api.send("POST", "/v1/sync", device: device, json: QuotaTests.upserts(400))
            #expect(push.status == 429)
            let list = try await api.send("GET", "/v1/logs?limit=200", device: device)
            #expect(list.status == 200)
            var stored = (list.json?["items"] as? [Any])?.count ?? 0
            var cursor = list.json?["nextCursor"] as? String
            while let next = cursor, stored < 2000 {
                let page = try await api.send("GET", "/v1/logs?limit=200&before=\(next)", device: device)
                stored += (page.json?["items"] as? [Any])?.count ?? 0
                cursor = page.json?["nextCursor"] as? String
            }
            #expect(stored == 500 + extra)
            // Another device has its own bucket.
            #expect(try await api.send("POST", "/v1/logs", device: other, json: QuotaTests.log()).status == 201)
            // The bucket refills: a write a second.
            try await Task.sleep(for: .seconds(wait + 1))
            #expect(try await api.send("POST", "/v1/logs", device: device, json: QuotaTests.log()).status == 201)
            let metrics = try await api.metrics()
            #expect(metrics.text.contains(#"poopypals_http_refusals_total{code="rate_limited"}"#), "\(metrics.text.prefix(2000))")
        }
    }

    /// Registrations per network, read from X-Forwarded-For only when the socket's peer is a trusted proxy.
    @Test func aNetworkRegisteringTooManyDevicesGets429AndOthersDoNot() async throws {
        try await TestDatabase.withAPI(configure: {
            $0.rates = RateLimits(registrationBurst: 3, registrationsPerHour: 1)
            $0.trustedProxies = ["127.0.0.1"]
        }) { api, _ in
            func register(_ device: UUID, from client: String) async throws -> HTTPReply {
                try await api.send("PUT", "/v1/device", device: device, headers: ["X-Forwarded-For": "\(client), 127.0.0.1"])
            }
            let first = UUID()
            #expect(try await register(first, from: "203.0.113.7").status == 201)
            for _ in 0..<2 { #expect(try await register(UUID(), from: "203.0.113.7").status == 201) }
            let limited = try await register(UUID(), from: "203.0.113.7")
            #expect(limited.status == 429)
            #expect(limited.errorCode == "rate_limited")
            #expect(Int(limited.header("Retry-After") ?? "") ?? 0 > 1000, "one an hour: \(limited.header("Retry-After") ?? "-")")
            #expect(limited.header("RateLimit-Policy") == #""registrations";q=3;w=10800"#)
            // A device registered before updates freely; another network registers.
            #expect(try await register(first, from: "203.0.113.7").status == 200)
            #expect(try await register(UUID(), from: "198.51.100.9").status == 201)
            // An IPv6 client is one network per /64.
            #expect(try await register(UUID(), from: "2001:db8:1:2::1").status == 201)
            #expect(try await register(UUID(), from: "2001:db8:1:2::2").status == 201)
            #expect(try await register(UUID(), from: "2001:db8:1:2:ffff::3").status == 201)
            #expect(try await register(UUID(), from: "2001:db8:1:2::4").status == 429)
            #expect(try await register(UUID(), from: "2001:db8:1:3::4").status == 201)
        }
    }

    @Test func xForwardedForFromAnUntrustedPeerIsIgnored() async throws {
        try await TestDatabase.withAPI(configure: {
            $0.rates = RateLimits(registrationBurst: 2, registrationsPerHour: 1)
            $0.trustedProxies = ["10.9.9.9"]
        }) { api, _ in
            var statuses: [Int] = []
            for n in 1...3 {
                statuses.append(try await api.send("PUT", "/v1/device", device: UUID(), headers: ["X-Forwarded-For": "203.0.113.\(n)"]).status)
            }
            #expect(statuses == [201, 201, 429], "every registration counts against 127.0.0.1: \(statuses)")
        }
    }

    @Test func networksAreNamedCanonically() {
        #expect(ClientNetwork.normalized("::ffff:192.0.2.1") == "192.0.2.1")
        #expect(ClientNetwork.normalized("192.0.2.1") == "192.0.2.1")
        #expect(ClientNetwork.normalized("not an address") == nil)
        #expect(ClientNetwork.normalized(String(repeating: "1", count: 100)) == nil)
        #expect(ClientNetwork.network("192.0.2.1") == "v4:192.0.2.1")
        #expect(ClientNetwork.network("2001:db8:0:1:aaaa::1") == "v6:2001:db8:0:1::/64")
        #expect(ClientNetwork.network("2001:DB8:0:1:bbbb::2") == "v6:2001:db8:0:1::/64")
        #expect(ClientNetwork.wideNetwork(of: "v6:2001:db8:0:1::/64") == "v6:2001:db8:0::/48")
        #expect(ClientNetwork.wideNetwork(of: "v4:192.0.2.1") == nil)
        let keys = NetworkKeys(tokenSecret: "a token secret of at least thirty-two characters")
        #expect(keys.key("v4:192.0.2.1").count == 64)
        #expect(keys.key("v4:192.0.2.1") != keys.key("v4:192.0.2.2"))
        #expect(keys.key("v4:192.0.2.1") != NetworkKeys(tokenSecret: "another token secret, also thirty-two long").key("v4:192.0.2.1"))
        #expect(keys.key("v4:192.0.2.1") != NetworkKeys(configured: String(repeating: "n", count: 32), tokenSecret: "a token secret of at least thirty-two characters").key("v4:192.0.2.1"))
    }

    /// Issue 58: the buckets' keys were SHA-256("poopypals.network.v1:" + the network), which anyone with a copy of the
    /// database (a dump, a backup, a standby) reversed by trying the 2^32 IPv4 addresses (127.0.0.1's in 0.16 s). After
    /// registrations from several addresses, no key is a plain digest of any form of them.
    @Test func noBucketKeyIsADigestAnyoneCanComputeFromAnAddress() async throws {
        try await TestDatabase.withAPI(configure: { $0.trustedProxies = ["127.0.0.1"] }) { api, db in
            let clients = ["203.0.113.7", "198.51.100.9", "2001:db8:1:2::1"]
            for client in clients {
                let reply = try await api.send("PUT", "/v1/device", device: UUID(), headers: ["X-Forwarded-For": "\(client), 127.0.0.1"])
                #expect(reply.status == 201)
            }
            let stored = Set(try await db.withConnection { conn in
                try conn.query("SELECT encode(network, 'hex') FROM registration_buckets").map { try $0.decode(0, as: String.self) }
            })
            #expect(stored.count >= clients.count, "\(stored)")  // the IPv6 client adds its /48's
            var forms: [String] = ["127.0.0.1", "v4:127.0.0.1"]
            for client in clients {
                forms += [client, "v4:" + client, "v6:" + client]
                if let network = ClientNetwork.network(client) { forms.append(network) }
                if let network = ClientNetwork.network(client), let wide = ClientNetwork.wideNetwork(of: network) { forms.append(wide) }
            }
            for form in forms {
                for prefix in ["", "poopypals.network.v1:", "poopypals.network.v2:"] {
                    let digest = SHA256.hash(data: Array((prefix + form).utf8)).map { String(format: "%02x", $0) }.joined()
                    #expect(!stored.contains(digest), "the key of \(form) is SHA-256 of \"\(prefix)\(form)\"")
                }
            }
        }
    }

    /// Issue 58: a bucket is kept no longer than it limits: once it has refilled to its burst, `poopypals maintenance`
    /// deletes it (rows were never deleted: the table was a log of every network that ever registered). One that has
    /// not refilled stays.
    @Test func aBucketIsForgottenOnceItHasRefilled() async throws {
        // The instance's own sweep is off here: maintenance is what is under test.
        try await TestDatabase.withAPI(configure: { $0.trustedProxies = ["127.0.0.1"]; $0.bucketSweepInterval = nil }) { api, db in
            for client in ["203.0.113.7", "198.51.100.9"] {
                let reply = try await api.send("PUT", "/v1/device", device: UUID(), headers: ["X-Forwarded-For": "\(client), 127.0.0.1"])
                #expect(reply.status == 201)
            }
            let count = { @Sendable in
                try await db.withConnection { try $0.query("SELECT count(*) FROM registration_buckets")[0].decode(0, as: Int.self) }
            }
            #expect(try await count() == 2)
            // One of them counted an hour ago: 120 an hour have refilled its one token long since. (The owner moves the
            // time back; nothing else changes.) The other is made empty: one token taken refills in 30 s, and CI once
            // took longer than that to get from the registration to maintenance (both were forgotten); 30 take 15 min.
            try await db.withConnection { conn in
                try conn.executeScript("""
                    UPDATE registration_buckets SET refilled_at = refilled_at - interval '1 hour'
                    WHERE network = (SELECT network FROM registration_buckets ORDER BY network LIMIT 1);
                    UPDATE registration_buckets SET tokens = 0
                    WHERE network = (SELECT network FROM registration_buckets ORDER BY network DESC LIMIT 1)
                    """)
            }
            let maintenance = try await TestProject.run(["maintenance", "--database-url", db.url])
            #expect(maintenance.status == 0, "\(maintenance.stderr)")
            #expect(maintenance.stdout.contains("Registration buckets: 1 full one forgotten."), "\(maintenance.stdout)")
            #expect(try await count() == 1)
        }
    }

    /// Issue 58: each instance also forgets refilled buckets in the background (`BucketSweeper`), so that a deployment
    /// without a maintenance cron keeps no network longer than it limits it.
    @Test func everyInstanceForgetsRefilledBucketsInTheBackground() async throws {
        try await TestDatabase.withAPI(configure: { $0.trustedProxies = ["127.0.0.1"]; $0.bucketSweepInterval = .milliseconds(200) }) { api, db in
            #expect(try await api.send("PUT", "/v1/device", device: UUID(), headers: ["X-Forwarded-For": "203.0.113.8, 127.0.0.1"]).status == 201)
            let count = { @Sendable in
                try await db.withConnection { try $0.query("SELECT count(*) FROM registration_buckets")[0].decode(0, as: Int.self) }
            }
            #expect(try await count() == 1)  // not full: kept
            try await db.withConnection { try $0.executeScript("UPDATE registration_buckets SET refilled_at = refilled_at - interval '1 hour'") }
            let deadline = ContinuousClock.now + .seconds(60)
            var left = 1
            while left > 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                left = try await count()
            }
            #expect(left == 0, "the refilled bucket was not forgotten within 60 s")
        }
    }

    /// Issue 58: an IPv6 /48 (free from tunnel brokers) holds 65 536 /64s, each with a bucket of its own: one
    /// allocation could register 65 536 × 30 devices an hour. The /48 has a bucket too, and refuses a burst spread
    /// over many /64s; another /48 registers.
    @Test func aSlash48RefusesABurstSpreadOverItsSlash64s() async throws {
        try await TestDatabase.withAPI(configure: {
            $0.rates = RateLimits(registrationBurst: 30, registrationsPerHour: 120, wideRegistrationBurst: 5, wideRegistrationsPerHour: 1)
            $0.trustedProxies = ["127.0.0.1"]
        }) { api, _ in
            var statuses: [Int] = []
            let devices = (1...6).map { _ in UUID() }
            for (n, device) in devices.enumerated() {
                let client = "2001:db8:77:\(String(n + 1, radix: 16))::1"
                statuses.append(try await api.send("PUT", "/v1/device", device: device, headers: ["X-Forwarded-For": "\(client), 127.0.0.1"]).status)
            }
            #expect(statuses == [201, 201, 201, 201, 201, 429], "\(statuses)")
            // The refused registration made no device.
            #expect(try await api.send("GET", "/v1/device", device: devices[5]).status == 404)
            #expect(try await api.send("GET", "/v1/device", device: devices[4]).status == 200)
            #expect(try await api.send("PUT", "/v1/device", device: UUID(), headers: ["X-Forwarded-For": "2001:db8:78:1::1, 127.0.0.1"]).status == 201)
        }
    }
}
