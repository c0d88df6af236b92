import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

extension CitusTests.Distributed {
    /// New devices registering and linking their profiles at once, on the distributed schema. Citus serializes the
    /// writes to each reference table with a lock per table, and a write to a table whose keys point at `users` (the
    /// key map, `devices`) takes `users`' lock after its own. A registration writes the map; the profile's link wrote
    /// `users`, then the map: each waited for the other (a distributed deadlock, cancelled after about 2 s; make bench's
    /// seeding saw 58 in 400 such requests on four connections, each retried). With no retry, one fails the test.
    /// The lock wait is 25 s: Citus's deadlock detection still makes a deadlock a 40P01, and a lock timeout on the
    /// loaded machine is not what is tested.
    @Test func devicesRegisteringAndLinkingProfilesAtOnceNeverDeadlock() async throws {
        try await CitusCluster.withMigratedDatabase("citus_w_", maxConnections: 4) { name, url, pool in
            let database = Database(pool: pool, retryPolicy: .never, timeouts: RequestTimeouts(statement: .seconds(30), lock: .seconds(25)))
            let (writers, each) = (4, 12)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        for n in 0..<each {
                            let device = try DeviceID(UUID())
                            #expect(try await DeviceRepository(database: database).register(DeviceInfo(model: "phone"), as: device).created)
                            _ = try await UserRepository(database: database).ensureProfileAndLink(
                                as: device, id: UUID(), email: "w\(writer)n\(n)@example.com")
                        }
                    }
                }
                try await group.waitForAll()
            }
            let superuser = try CitusCluster.superuser(name, url: url)
            let linked = try await superuser.withConnection { conn in
                try conn.query("SELECT count(*) FROM device_key_map WHERE user_id IS NOT NULL")[0].decode(0, as: Int.self)
            }
            await superuser.close()
            #expect(linked == writers * each)
        }
    }

    /// Two phones sharing one device id (after a device migration): one registers again (the app's launch) while the
    /// other links the profile, over and over, at once, with no retry allowed. Both write the key map's row of the
    /// one key and `users`; on Citus each of those reference tables' writes is serialized by a lock of its own,
    /// taken in the order the statements write (sql/0032 made the link take the map's first, as registration does).
    @Test func aRegistrationAndALinkOfOneKeyAtOnceNeverDeadlock() async throws {
        try await CitusCluster.withMigratedDatabase("citus_k_", maxConnections: 2) { _, _, pool in
            let database = Database(pool: pool, retryPolicy: .never, timeouts: RequestTimeouts(statement: .seconds(30), lock: .seconds(25)), deviceSlots: DeviceSlots(perDevice: 2, wait: .seconds(60)))
            let device = try DeviceID(UUID())
            #expect(try await DeviceRepository(database: database).register(DeviceInfo(model: "first"), as: device).created)
            let profile = UUID()
            for round in 0..<15 {
                async let registered = DeviceRepository(database: database).register(DeviceInfo(model: "phone \(round % 2)"), as: device)
                async let linked = UserRepository(database: database).ensureProfileAndLink(as: device, id: profile, email: "shared@example.com")
                let (registration, link) = try await (registered, linked)
                #expect(!registration.created)
                #expect(link.profile.user.id == profile)
            }
            #expect(try await UserRepository(database: database).find(id: profile, as: device)?.id == profile)
        }
    }
}
