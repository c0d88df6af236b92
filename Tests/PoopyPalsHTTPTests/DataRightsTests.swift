import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import Testing
import Values
import TestSupport

/// The device id is a password (sql/0010): kept only as a key, rotatable, and its data can be exported and erased.
@Suite("Device ids as passwords: keys at rest, rotation, erasure, export")
struct DataRightsTests {
    static let needsSuperuser = Testing.ConditionTrait.enabled(
        if: PgDump.superuserURL != nil, "needs POOPYPALS_TEST_SUPERUSER_URL to dump the database (make test sets it)")

    static func serverMajor(_ db: TestDatabase) async throws -> Int {
        try await db.withConnection { try $0.query("SELECT current_setting('server_version_num')::int / 10000")[0].decode(0, as: Int.self) }
    }

    /// Every spelling of a UUID a dump might use.
    static func spellings(_ id: UUID) -> [String] {
        let lower = id.uuidString.lowercased()
        return [lower, lower.uppercased(), lower.replacingOccurrences(of: "-", with: ""),
                lower.uppercased().replacingOccurrences(of: "-", with: "")]
    }

    static func uuids(in text: String) -> Set<String> {
        let pattern = /[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}/
        return Set(text.matches(of: pattern).map { String($0.output) })
    }

    static func register(_ api: LiveAPI, _ device: UUID) async throws {
        let reply = try await api.send("PUT", "/v1/device", device: device, json: #"{"model": "phone"}"#)
        #expect(reply.status == 201, "\(reply.text)")
    }

    @discardableResult
    static func log(_ api: LiveAPI, _ device: UUID, minutesAgo: Int = 5) async throws -> String {
        let at = Timestamp.formatForTests(Date(timeIntervalSinceNow: -Double(minutesAgo * 60)))
        let reply = try await api.send("POST", "/v1/logs", device: device, json: #"{"occurredAt": "\#(at)", "bristolType": 4, "notes": "n"}"#)
        #expect(reply.status == 201, "\(reply.text)")
        return reply.json?["id"] as? String ?? ""
    }

    static func logIDs(_ api: LiveAPI, _ device: UUID) async throws -> [String] {
        let reply = try await api.send("GET", "/v1/logs?limit=200", device: device)
        return (reply.json?["items"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
    }

    // MARK: Keys at rest

    @Test(needsSuperuser)
    func aDumpHoldsNoDeviceIDAndReplayingItsUUIDsRevealsNothing() async throws {
        try await TestDatabase.withAPI { api, db in
            let devices = (0..<3).map { _ in UUID() }
            for device in devices {
                try await Self.register(api, device)
                try await Self.log(api, device)
                let gone = try await Self.log(api, device)
                #expect(try await api.send("DELETE", "/v1/logs/\(gone)", device: device).status == 204)
            }
            let token = try await api.token(email: "dump@example.com")
            #expect(try await api.send("PUT", "/v1/profile", device: devices[0], token: token, json: "{}").status == 200)

            let dump = try await PgDump.dump(database: db.name, serverMajor: try await Self.serverMajor(db))
            for device in devices {
                for spelling in Self.spellings(device) { #expect(!dump.contains(spelling), "the dump holds a device id") }
                // The data is there, under the key.
                #expect(dump.contains(device.deviceKey.uuidString.lowercased()))
            }
            // An attacker with the dump replays every uuid in it (keys, log ids, user ids) as a device id.
            let found = Self.uuids(in: dump)
            #expect(found.count >= 10)
            for candidate in found {
                guard let uuid = UUID(uuidString: candidate.count == 36 ? candidate : Self.hyphenated(candidate)) else { continue }
                let device = try await api.send("GET", "/v1/device", device: uuid)
                #expect(device.status == 404 || device.status == 401, "GET /v1/device answered \(device.status)")
                #expect(try await Self.logIDs(api, uuid).isEmpty)
                #expect(try await api.send("GET", "/v1/export", device: uuid).status != 200)
                #expect((try await api.send("GET", "/v1/sync", device: uuid).json?["changes"] as? [Any] ?? []).isEmpty)
            }
        }
    }

    static func hyphenated(_ hex: String) -> String {
        let c = Array(hex)
        return [String(c[0..<8]), String(c[8..<12]), String(c[12..<16]), String(c[16..<20]), String(c[20..<32])].joined(separator: "-")
    }

    @Test func weakIDsAreRefusedForNewDevicesAndOldOnesKeepWorking() async throws {
        try await TestDatabase.withAPI { api, db in
            for weak in ["00000000-0000-0000-0000-000000000000", "6f1c0a4e-3b2d-11ef-9f70-8a9b0c1d2e3f"] {
                let reply = try await api.send("PUT", "/v1/device", headers: ["X-Device-ID": weak], json: "{}")
                #expect(reply.status == 400 && reply.errorCode == "weak_device_id", "\(weak): \(reply.status) \(reply.text)")
                #expect(!reply.text.contains(weak))
            }
            #expect(try await api.send("GET", "/v1/device", headers: ["X-Device-ID": "6f1c0a4e-3b2d-11ef-9f70-8a9b0c1d2e3f"]).status == 404)

            // A version-1 device registered before the rule (as the service did then: created whatever the id's kind).
            let legacy = try #require(UUID(uuidString: "7a2b0a4e-3b2d-11ef-9f70-8a9b0c1d2e3f"))
            let database = Database(pool: db.pool(size: 1))
            try await database.asDevice(DeviceID(legacy)) { tx in
                try tx.finalQuery("SELECT outcome FROM poopypals_register_device(NULL, NULL, NULL, NULL, false, true, '', 30, 1)")
            }
            await database.pool.close()
            let again = try await api.send("PUT", "/v1/device", device: legacy, json: #"{"model": "old"}"#)
            #expect(again.status == 200 && again.json?["model"] as? String == "old")
            #expect(try await api.send("POST", "/v1/logs", device: legacy,
                                       json: #"{"occurredAt": "2026-01-01T00:00:00Z", "bristolType": 3}"#).status == 201)

            let strong = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: strong, json: "{}").status == 201)
            for weak in ["00000000-0000-0000-0000-000000000000", "6f1c0a4e-3b2d-11ef-9f70-8a9b0c1d2e3f"] {
                let rotate = try await api.send("POST", "/v1/device/rotate", device: strong, json: #"{"newDeviceId": "\#(weak)"}"#)
                #expect(rotate.status == 400 && rotate.errorCode == "weak_device_id")
            }
            #expect(try await api.send("GET", "/v1/device", device: strong).status == 200)
        }
    }

    // MARK: Rotation

    @Test func rotationMovesEverythingAndLocksTheOldIDOut() async throws {
        try await TestDatabase.withAPI { api, _ in
            let (old, new, other) = (UUID(), UUID(), UUID())
            try await Self.register(api, old)
            try await Self.register(api, other)
            var kept: [String] = []
            for minutes in 1...4 { kept.append(try await Self.log(api, old, minutesAgo: minutes)) }
            let gone = try await Self.log(api, old)
            #expect(try await api.send("DELETE", "/v1/logs/\(gone)", device: old).status == 204)
            let subject = UUID()
            let token = try await api.token(user: subject, email: "rotate@example.com")
            #expect(try await api.send("PUT", "/v1/profile", device: old, token: token, json: #"{"fullName": "R"}"#).status == 200)
            let pulled = try await api.send("GET", "/v1/sync?limit=100", device: old)
            let cursor = try #require(pulled.json?["cursor"] as? String)
            let before = try await api.send("GET", "/v1/logs?limit=200", device: old).json?["items"] as? [[String: Any]] ?? []

            // A new id that is registered already: 409, nothing moves.
            let taken = try await api.send("POST", "/v1/device/rotate", device: old, json: #"{"newDeviceId": "\#(other.uuidString)"}"#)
            #expect(taken.status == 409 && taken.errorCode == "device_id_in_use")
            let same = try await api.send("POST", "/v1/device/rotate", device: old, json: #"{"newDeviceId": "\#(old.uuidString)"}"#)
            #expect(same.status == 409)
            #expect(Set(try await Self.logIDs(api, old)) == Set(kept))
            #expect(try await Self.logIDs(api, other).isEmpty)

            let rotated = try await api.send("POST", "/v1/device/rotate", device: old, json: #"{"newDeviceId": "\#(new.uuidString)"}"#)
            #expect(rotated.status == 200, "\(rotated.text)")
            #expect(rotated.json?["id"] as? String == new.uuidString.lowercased())
            #expect(rotated.json?["userId"] as? String == subject.uuidString.lowercased())
            #expect(!rotated.text.contains(old.uuidString.lowercased()))

            // The old id is an unknown device.
            #expect(try await api.send("GET", "/v1/device", device: old).status == 404)
            #expect(try await Self.logIDs(api, old).isEmpty)
            #expect(try await api.send("GET", "/v1/profile", device: old, token: token).status == 404)
            #expect(try await api.send("POST", "/v1/device/rotate", device: old, json: #"{"newDeviceId": "\#(UUID().uuidString)"}"#).status == 404)
            // The new id has everything, unchanged (same versions: a move is not a change) …
            let after = try await api.send("GET", "/v1/logs?limit=200", device: new).json?["items"] as? [[String: Any]] ?? []
            #expect(after.map { "\($0["id"] ?? "")/\($0["version"] ?? "")" } == before.map { "\($0["id"] ?? "")/\($0["version"] ?? "")" })
            #expect(try await api.send("GET", "/v1/profile", device: new, token: token).json?["user"].map { ($0 as? [String: Any])?["fullName"] as? String } == "R")
            // … and the phone's sync cursor is still valid, with nothing new after it; a fresh pull sees the delete.
            let resumed = try await api.send("GET", "/v1/sync?cursor=\(cursor)", device: new)
            #expect(resumed.status == 200 && (resumed.json?["changes"] as? [Any])?.isEmpty == true)
            let fresh = try await api.send("GET", "/v1/sync?limit=100", device: new).json?["changes"] as? [[String: Any]] ?? []
            #expect(fresh.contains { $0["op"] as? String == "delete" && $0["id"] as? String == gone })
            #expect(fresh.count == 5)
        }
    }

    /// Another phone keeps writing with the old id while the new phone rotates: every write it was told
    /// succeeded is found under the new id; the rest were refused, never lost, never a 5xx.
    @Test func rotationUnderFourWritersOnTheOldIDLosesNoAcknowledgedWrite() async throws {
        try await TestDatabase.withAPI(poolSize: 8) { api, _ in
            let (old, new) = (UUID(), UUID())
            try await Self.register(api, old)
            let acknowledged = Locked<[String]>([])
            let statuses = Locked<[Int: Int]>([:])
            let rotatedAt = Locked<ContinuousClock.Instant?>(nil)
            // The rotation waits for 40 acknowledged writes, or 20 s; the writers go on until a write after it is
            // refused (or 120 s), so that writes after the rotation are seen even on a machine that managed 32 writes
            // in 20 s (under the whole suite on two cores).
            let start = ContinuousClock.now
            let deadline = start + .seconds(120)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        // Until 1 s after the rotation (or the deadline), at most 3 000 writes each: 400 each were
                        // all spent before the rotation got the device's lock once (make test, PostgreSQL 18, with
                        // writes cheaper since sql/0024), and then no write came after it.
                        for _ in 0..<3_000 {
                            // Once the rotation is done and a write was refused after it (or 30 s after it): a
                            // fixed second after it was too short for one write on a loaded machine (issue 56).
                            if let at = rotatedAt.value,
                               (statuses.value[409] ?? 0) > 0 || ContinuousClock.now - at > .seconds(30) { break }
                            if ContinuousClock.now > deadline { break }
                            let id = UUID().uuidString.lowercased()
                            let reply = try await api.send("POST", "/v1/logs", device: old,
                                                           json: #"{"id": "\#(id)", "occurredAt": "2026-01-01T00:00:00Z", "bristolType": 2}"#)
                            statuses.withLock { $0[reply.status, default: 0] += 1 }
                            if reply.status == 201 || reply.status == 200 { acknowledged.withLock { $0.append(id) } }
                        }
                    }
                }
                group.addTask {
                    while acknowledged.value.count < 40, ContinuousClock.now < start + .seconds(20) { try await Task.sleep(for: .milliseconds(5)) }
                    let reply = try await api.send("POST", "/v1/device/rotate", device: old, json: #"{"newDeviceId": "\#(new.uuidString)"}"#)
                    #expect(reply.status == 200, "\(reply.text)")
                    rotatedAt.withLock { $0 = .now }
                }
                try await group.waitForAll()
            }
            #expect(rotatedAt.value != nil)
            let codes = statuses.value
            #expect(Set(codes.keys).isSubset(of: [200, 201, 409]), "\(codes)")
            #expect((codes[409] ?? 0) > 0, "no write was refused after the rotation: \(codes)")
            // Every acknowledged write is under the new id (export reads them all), none under the old one.
            let export = try await api.send("GET", "/v1/export", device: new)
            let stored = Set((export.json?["logs"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String })
            #expect(stored == Set(acknowledged.value), "acknowledged \(acknowledged.value.count), stored \(stored.count)")
            #expect(try await Self.logIDs(api, old).isEmpty)
        }
    }

    /// A phone that has read its whole export may ask for it again at once. The export's slot (`ExportGate`: one per
    /// device) was given back after the body's last bytes were written, so the phone could read them and send its
    /// next export before the server had: 429 `export_busy` to a client that waited for every answer (make test's
    /// PostgreSQL 18 stage, aDeviceIdAloneNeitherRevealsNorErasesTheProfile's second export).
    @Test func anExportReadToItsEndMayBeAskedForAgainAtOnce() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            try await Self.register(api, device)
            var statuses: [Int: Int] = [:]
            for _ in 0..<300 {
                statuses[try await api.send("GET", "/v1/export", device: device).status, default: 0] += 1
            }
            #expect(statuses == [200: 300])
        }
    }

    /// The device id alone revealed and erased the person's profile (issue 42, item 5): a sold phone's id leaked its
    /// owner's email, name and date of birth through the export, and erased the account. Now the export gives the
    /// profile only with a token of its subject (else only that one is linked), and erasing the device without that
    /// token unlinks the profile and keeps it, for its owner.
    @Test func aDeviceIdAloneNeitherRevealsNorErasesTheProfile() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            try await Self.register(api, device)
            let subject = UUID()
            let token = try await api.token(user: subject, email: "owner@example.com")
            #expect(try await api.send("PUT", "/v1/profile", device: device, token: token,
                                       json: #"{"fullName":"Olive Owner","dateOfBirth":"1980-05-06"}"#).status == 200)
            let bare = try await api.send("GET", "/v1/export", device: device)
            #expect(bare.status == 200)
            #expect(bare.json?["profile"] == nil && bare.json?["profileLinked"] as? Bool == true)
            #expect(!bare.text.contains("owner@") && !bare.text.contains("Olive") && !bare.text.contains("1980"))
            // Another subject's token shows nothing of it either; a bad token is refused.
            let stranger = try await api.send("GET", "/v1/export", device: device, token: try await api.token(email: "stranger@example.com"))
            #expect(stranger.status == 200 && stranger.json?["profile"] == nil && !stranger.text.contains("Olive"))
            #expect(try await api.send("GET", "/v1/export", device: device, headers: ["Authorization": "Bearer not.a.token"]).status == 401)
            // Erased with the device id alone: the device goes, the profile stays for its owner.
            #expect(try await api.send("DELETE", "/v1/device", device: device).status == 204)
            let again = UUID()
            try await Self.register(api, again)
            let profile = try await api.send("PUT", "/v1/profile", device: again, token: token)
            #expect(profile.status == 200)
            #expect((profile.json?["user"] as? [String: Any])?["fullName"] as? String == "Olive Owner")
        }
    }

    // MARK: Erasure

    @Test(needsSuperuser)
    func erasureKeepsASharedProfileUntilItsLastDeviceAndLeavesNoTrace() async throws {
        try await TestDatabase.withAPI { api, db in
            let (first, second) = (UUID(), UUID())
            let subject = UUID()
            let email = "erase-me@example.com"
            let token = try await api.token(user: subject, email: email)
            var logs: [String] = []
            for device in [first, second] {
                try await Self.register(api, device)
                #expect(try await api.send("PUT", "/v1/profile", device: device, token: token, json: #"{"fullName": "Erin"}"#).status == 200)
                logs.append(try await Self.log(api, device))
                let gone = try await Self.log(api, device)
                logs.append(gone)
                #expect(try await api.send("DELETE", "/v1/logs/\(gone)", device: device).status == 204)
            }
            #expect(try await api.send("DELETE", "/v1/device", device: first).status == 204)
            #expect(try await api.send("GET", "/v1/device", device: first).status == 404)
            #expect(try await api.send("DELETE", "/v1/device", device: first).status == 404)
            // The profile stays: another device links to it.
            #expect(try await api.send("GET", "/v1/profile", device: second, token: token).status == 200)
            #expect(try await Self.logIDs(api, second).count == 1)

            // The last device, erased with its owner's token: the profile goes too (issue 42, item 5: without the
            // token it stays; aDeviceIdAloneNeitherRevealsNorErasesTheProfile).
            #expect(try await api.send("DELETE", "/v1/device", device: second, token: token).status == 204)
            #expect(try await api.send("DELETE", "/v1/device", device: second).status == 404)

            let dump = try await PgDump.dump(database: db.name, serverMajor: try await Self.serverMajor(db))
            var traces = [email, subject.uuidString.lowercased()] + logs
            for device in [first, second] { traces += Self.spellings(device) + [device.deviceKey.uuidString.lowercased()] }
            for trace in traces { #expect(!dump.contains(trace), "the dump still holds a trace of the erased data") }
            // And the same subject can start over.
            try await Self.register(api, UUID())
        }
    }

    /// Issue 41, item 4: a device of more logs than one transaction deletes is stopped at once (its id works for
    /// nothing but following the erasure), answered 202 with what remains, and erased to the end in the background.
    @Test(needsSuperuser)
    func aLargeDeviceStopsAtOnceAndIsErasedInTheBackground() async throws {
        // This instance finishes no erasure in the background (one started below does), so what a request sees
        // does not depend on when the background runs.
        try await TestDatabase.withAPI(configure: { $0.erasureInterval = nil }) { api, db in
            let (device, subject) = (UUID(), UUID())
            let token = try await api.token(user: subject, email: "large@example.com")
            try await Self.register(api, device)
            #expect(try await api.send("PUT", "/v1/profile", device: device, token: token, json: #"{"fullName": "Lou"}"#).status == 200)
            let total = 2 * DeviceRepository.erasureBatch + 1_234
            try await db.seedLogs(deviceKey: device.deviceKey, count: total)

            let first = try await api.send("DELETE", "/v1/device", device: device, token: token)
            #expect(first.status == 202, "\(first.text)")
            let remaining = first.json?["logsRemaining"] as? Int ?? 0
            #expect(remaining > 0 && remaining <= total - DeviceRepository.erasureBatch)
            // Stopped at once: an unknown device to every route, its profile gone with the owner's token.
            #expect(try await api.send("GET", "/v1/device", device: device).status == 404)
            #expect(try await Self.logIDs(api, device).isEmpty)
            #expect(try await api.send("GET", "/v1/profile", device: device, token: token).status != 200)
            let again = try await api.send("PUT", "/v1/device", device: device, json: #"{"model": "phone"}"#)
            #expect(again.status == 409 && again.errorCode == "device_being_erased", "\(again.text)")

            // The same DELETE reports progress (and deletes a batch itself).
            let progress = try await api.send("DELETE", "/v1/device", device: device)
            #expect(progress.status == 202 && (progress.json?["logsRemaining"] as? Int ?? 0) < remaining, "\(progress.text)")
            // The rest goes in the background, with no request asking for it.
            let background = try await LiveAPI.start(db.configuration) { $0.erasureInterval = .milliseconds(200) }
            let deadline = ContinuousClock.now + .seconds(90)
            var left = ["-1"]
            do {
                while left != ["0"], ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(500))
                    left = try await Superuser.column("""
                        SELECT (SELECT count(*) FROM poop_logs) + (SELECT count(*) FROM devices) + (SELECT count(*) FROM users)
                        """, in: db.name)
                }
            } catch {
                await background.stop()
                throw error
            }
            await background.stop()
            #expect(left == ["0"])
            #expect(try await api.send("DELETE", "/v1/device", device: device).status == 404)
            try await Self.register(api, device)
        }
    }

    @Test func operatorsEraseByEmailWithADryRunFirst() async throws {
        try await TestDatabase.withAPI { api, db in
            let (first, second, bystander) = (UUID(), UUID(), UUID())
            let token = try await api.token(email: "support@example.com")
            for device in [first, second] {
                try await Self.register(api, device)
                #expect(try await api.send("PUT", "/v1/profile", device: device, token: token, json: "{}").status == 200)
            }
            try await Self.log(api, first)
            try await Self.log(api, first)
            try await Self.log(api, second)
            try await Self.register(api, bystander)
            try await Self.log(api, bystander)

            let dry = try await TestProject.run(["users", "erase", "--email", " Support@Example.com ", "--dry-run", "--database-url", db.url])
            #expect(dry.status == 0, "\(dry.stderr)")
            #expect(dry.stdout.contains("Would erase") && dry.stdout.contains("1 profile, 2 devices, 3 logs"), "\(dry.stdout)")
            #expect(!dry.stdout.contains("support@example.com"))
            #expect(try await api.send("GET", "/v1/device", device: first).status == 200)

            let real = try await TestProject.run(["users", "erase", "--email", "support@example.com", "--database-url", db.url])
            #expect(real.status == 0 && real.stdout.contains("Erased") && real.stdout.contains("2 devices, 3 logs"), "\(real.stdout) \(real.stderr)")
            for device in [first, second] { #expect(try await api.send("GET", "/v1/device", device: device).status == 404) }
            #expect(try await Self.logIDs(api, bystander).count == 1)

            let again = try await TestProject.run(["users", "erase", "--email", "support@example.com", "--database-url", db.url])
            #expect(again.status == 1 && again.stdout.contains("nothing to erase"))
            let bad = try await TestProject.run(["users", "erase", "--email", "not an email", "--database-url", db.url])
            #expect(bad.status != 0 && !bad.stdout.contains("Erased"))
        }
    }

    @Test func devicesKeyPrintsWhatTheDatabaseStores() async throws {
        let id = UUID()
        let printed = try await TestProject.run(["devices", "key", id.uuidString])
        #expect(printed.status == 0 && printed.stdout == id.deviceKey.uuidString.lowercased() + "\n")
        let invalid = try await TestProject.run(["devices", "key", "nope"])
        #expect(invalid.status != 0 && invalid.stdout.isEmpty)
    }

    // MARK: Export

    @Test func exportIsEveryLogOldestFirstAsTheLogRouteShowsIt() async throws {
        try await TestDatabase.withAPI { api, _ in
            let device = UUID()
            try await Self.register(api, device)
            let noProfile = try #require(try await api.send("GET", "/v1/export", device: device).json)
            #expect(noProfile["profile"] == nil && noProfile["device"] != nil)
            let token = try await api.token(email: "export@example.com")
            #expect(try await api.send("PUT", "/v1/profile", device: device, token: token, json: "{}").status == 200)
            for minutes in [3, 9, 1, 6] { try await Self.log(api, device, minutesAgo: minutes) }
            let other = UUID()
            try await Self.register(api, other)
            try await Self.log(api, other)

            let export = try await api.send("GET", "/v1/export", device: device, token: token)
            #expect(export.status == 200)
            #expect(export.header("Content-Type")?.hasPrefix("application/json") == true)
            let json = try #require(export.json)
            #expect((json["device"] as? [String: Any])?["id"] as? String == device.uuidString.lowercased())
            #expect((json["profile"] as? [String: Any])?["email"] as? String == "export@example.com")
            #expect(json["profileLinked"] as? Bool == true)
            let logs = try #require(json["logs"] as? [[String: Any]])
            #expect(logs.count == 4)
            let times = logs.compactMap { $0["occurredAt"] as? String }
            #expect(times == times.sorted() && times.count == 4)
            for log in logs {
                let id = try #require(log["id"] as? String)
                let single = try await api.send("GET", "/v1/logs/\(id)", device: device)
                #expect(NSDictionary(dictionary: log).isEqual(to: try #require(single.json)))
            }
            #expect(try await api.send("GET", "/v1/export", device: UUID()).status == 404)
        }
    }

}

extension Timestamp {
    static func formatForTests(_ date: Date) -> String { (try? format(date)) ?? "" }
}
