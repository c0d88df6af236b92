import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

extension CitusTests.Distributed {
    /// On Citus a write's position is per worker: the coordinator's WAL position says nothing of what a worker's
    /// standby has replayed, so a `Consistency-Token` made from it would promise what it cannot check. On a Citus node
    /// no write records one, and the read pool (`POOPYPALS_READ_DATABASE_URL`) is not used: every read runs on the
    /// coordinator, and sees every write (docs/scaling.md). The read pool here is another migrated Citus database,
    /// empty: a read it served would not find the device. Before the change, the create recorded the coordinator's
    /// position and the reads went to the read pool.
    @Test func noWriteCarriesATokenAndNoReadGoesToTheReadPool() async throws {
        try await CitusCluster.withMigratedDatabase("citus_p_") { _, _, primary in
            try await CitusCluster.withMigratedDatabase("citus_s_") { _, _, elsewhere in
                // The primary is met first (a registration): reads skip the read pool from then on.
                let database = Database(pool: primary, readPool: elsewhere)
                let device = try DeviceID(UUID())
                #expect(try await DeviceRepository(database: database).register(DeviceInfo(), as: device).created)
                let commits = CommitRecorder()
                let created = try await RequestTrace.$commits.withValue(commits) {
                    try await PoopLogRepository(database: database).create(
                        NewPoopLog(occurredAt: Date(timeIntervalSince1970: 1_700_000_000), bristolType: 4), as: device)
                }
                #expect(created.created)
                #expect(commits.token == nil)
                let token = try #require(ConsistencyToken(lsn: "0/1"))
                let logs = PoopLogRepository(database: database)
                #expect(try await logs.list(as: device).items.map(\.id) == [created.log.id])
                #expect(try await logs.list(as: device, consistency: token).items.map(\.id) == [created.log.id])
                #expect(try await logs.get(created.log.id, as: device, consistency: token)?.id == created.log.id)
                #expect(elsewhere.statistics.open == 0)

                // A read met first: its read-pool connection is found on a Citus node, and the read runs on the primary.
                let fresh = Database(pool: primary, readPool: elsewhere)
                #expect(try await PoopLogRepository(database: fresh).list(as: device, consistency: token).items.map(\.id) == [created.log.id])
                #expect(try await PoopLogRepository(database: fresh).list(as: device).items.map(\.id) == [created.log.id])
                #expect(elsewhere.statistics.open <= 1)
            }
        }
    }
}
