import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// `poopypals monitor archiving` (issue 43). Its happy path runs on the archiving cluster in
/// scripts/backup_drill.py; here, what it must say about a server that does not archive, and its rules.
@Suite("Archiving monitor")
struct ArchiveMonitorTests {
    @Test func aServerThatDoesNotArchiveFailsTheCheck() async throws {
        try await TestDatabase.with { db in
            let mode = try await db.withConnection { try $0.query("SELECT current_setting('archive_mode')")[0].decode(0, as: String.self) }
            let output = try await TestProject.run(["monitor", "archiving", "--database-url", db.url])
            if mode == "off" {
                #expect(output.status == 1, "\(output.stdout) \(output.stderr)")
                #expect(output.stdout.contains("FAIL archive_mode is off"), "\(output.stdout)")
            } else {
                #expect(output.status == 0 || output.status == 1, "\(output.stdout) \(output.stderr)")
                #expect(output.stdout.contains("archive_mode \(mode)"), "\(output.stdout)")
            }
            let json = try await TestProject.run(["monitor", "archiving", "--json", "--database-url", db.url])
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            #expect((document["ok"] as? Bool) == (json.status == 0))
            #expect((document["status"] as? [String: Any])?["archiveMode"] as? String == mode)
        }
    }

    @Test func aBadMaxLagIsRefused() async throws {
        let output = try await TestProject.run(["monitor", "archiving", "--max-lag", "soon", "--database-url", "postgresql://x@127.0.0.1:1/x"])
        #expect(output.status != 0)
        #expect(output.stderr.contains("max-lag"), "\(output.stderr)")
    }

    @Test func theRules() {
        func status(mode: String = "on", since: Double? = 5, failing: Bool = false, waiting: Int64? = 0) -> ArchiveStatus {
            ArchiveStatus(archiveMode: mode, archivedCount: 10, lastArchivedWAL: since == nil ? nil : "000000010000000000000009",
                          secondsSinceLastArchived: since, failedCount: failing ? 1 : 0, failing: failing, segmentsWaiting: waiting)
        }
        #expect(status().problems(maxLag: 60).isEmpty)
        // Idle for a day, nothing waiting: fine.
        #expect(status(since: 86_400, waiting: 0).problems(maxLag: 60).isEmpty)
        // Segments waiting, but the last went 30 s ago: keeping up.
        #expect(status(since: 30, waiting: 3).problems(maxLag: 60).isEmpty)
        #expect(status(since: 90, waiting: 3).problems(maxLag: 60) == ["3 finished WAL segments not archived, the last archived 90 s ago (limit 60 s)"])
        #expect(status(since: nil, waiting: 2).problems(maxLag: 60).count == 1)
        #expect(status(failing: true).problems(maxLag: 60).first?.hasPrefix("the last archive attempt failed") == true)
        #expect(status(mode: "off").problems(maxLag: 60).first?.hasPrefix("archive_mode is off") == true)
    }
}
