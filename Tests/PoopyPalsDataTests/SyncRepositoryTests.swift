import Foundation
import PoopyPalsData
import Testing
import TestSupport

/// The data layer names a bad operation by its index and the operation's own field; the API's paths
/// (`operations[1].log.bristolType`) are the HTTP layer's business.
@Suite("Sync repository")
struct SyncRepositoryTests {
    @Test func anInvalidOperationIsNamedByItsIndexAndItsOwnFieldAndNothingIsApplied() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let device = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: device)
            let sync = SyncRepository(database: database)
            let good = SyncOperation.upsert(id: UUID(), occurredAt: Date(timeIntervalSince1970: 1_700_000_000), bristolType: 4,
                                            notes: nil, baseVersion: nil)
            let cases: [(SyncOperation, String)] = [
                (.upsert(id: UUID(), occurredAt: Date(timeIntervalSince1970: 1_700_000_000), bristolType: 9, notes: nil, baseVersion: nil), "bristolType"),
                (.upsert(id: UUID(), occurredAt: Date(timeIntervalSince1970: 1_700_000_000), bristolType: 3,
                         notes: String(repeating: "x", count: PoopLog.notesLimit + 1), baseVersion: nil), "notes"),
                (.upsert(id: UUID(), occurredAt: Date(timeIntervalSince1970: 1_700_000_000), bristolType: 3, notes: nil, baseVersion: -1), "baseVersion"),
            ]
            for (bad, field) in cases {
                do {
                    _ = try await sync.push([good, bad], as: device)
                    Issue.record("pushed an operation with a bad \(field)")
                } catch SyncError.invalidOperation(let index, let invalid) {
                    #expect(index == 1)
                    #expect(invalid.field == field)
                    #expect(!invalid.reason.isEmpty && !invalid.reason.contains("operations"))
                }
            }
            #expect(try await sync.pull(cursor: nil, limit: 10, as: device).changes.isEmpty)
        }
    }
}
