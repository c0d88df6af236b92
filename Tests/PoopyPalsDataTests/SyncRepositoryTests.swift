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

    /// A page is at most `PageBytes.budget` whatever its limit (issue 41: 500 changes with 2 000-character notes
    /// were 4 MiB, built whole for each request); the pages that follow bring every change exactly once, and so do
    /// the log list's.
    @Test func pagesAreBoundedInBytesAndTogetherComplete() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let device = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: device)
            let sync = SyncRepository(database: database)
            // Control characters: each is escaped to six bytes, so each note is up to 12 000 bytes of JSON.
            let notes = String(repeating: "a\u{1}", count: PoopLog.notesLimit / 2)
            let ids = (0..<300).map { _ in UUID() }
            for batch in stride(from: 0, to: ids.count, by: 100) {
                _ = try await sync.push(ids[batch..<batch + 100].enumerated().map { n, id in
                    .upsert(id: id, occurredAt: Date(timeIntervalSince1970: 1_700_000_000 + Double(batch + n)), bristolType: 4,
                            notes: notes, baseVersion: nil)
                }, as: device)
            }
            var seen: [UUID] = []
            var cursor: String?
            var pages = 0
            while pages < 100 {
                let page = try await sync.pull(cursor: cursor, limit: 500, as: device)
                pages += 1
                let bytes = page.changes.reduce(0) { total, change in
                    if case .upsert(let log) = change { total + log.responseSizeBound } else { total }
                }
                #expect(bytes <= PageBytes.budget, "a page of \(bytes) bytes")
                seen += page.changes.compactMap { if case .upsert(let log) = $0 { log.id } else { nil } }
                cursor = page.cursor
                if !page.hasMore { break }
            }
            #expect(pages > 1)
            #expect(seen.count == ids.count && Set(seen) == Set(ids))
            let logs = PoopLogRepository(database: database)
            var listed: [UUID] = []
            var before: String?
            for _ in 0..<100 {
                let page = try await logs.list(before: before, limit: 200, as: device)
                #expect(page.items.reduce(0) { $0 + $1.responseSizeBound } <= PageBytes.budget)
                listed += page.items.map(\.id)
                guard let next = page.nextCursor else { break }
                before = next
            }
            #expect(listed.count == ids.count && Set(listed) == Set(ids))
        }
    }
}
