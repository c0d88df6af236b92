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
    @Test func devicesRegisteringAndLinkingProfilesAtOnceNeverDeadlock() async throws {
        try await CitusCluster.withMigratedDatabase("citus_w_", maxConnections: 4) { name, url, pool in
            let database = Database(pool: pool, retryPolicy: .never)
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
}
