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
        #expect(RateLimits.networkKey("v4:192.0.2.1").count == 64)
        #expect(RateLimits.networkKey("v4:192.0.2.1") != RateLimits.networkKey("v4:192.0.2.2"))
    }
}
