import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// Ready to shard by device: every statement a device request sends names its device explicitly, besides row-level
/// security (defence in depth, and what lets Citus route a query to the one shard of that device).
@Suite("Every device query names its device")
struct ShardReadyTests {
    /// Every repository operation on one session with the statement cache on; then the session's prepared
    /// statements are every SQL text the repositories sent, read from the server itself (`pg_prepared_statements`).
    @Test func everyStatementOfADeviceRequestCarriesAnExplicitDevicePredicate() async throws {
        try await TestDatabase.withMigrated { db in
            var connection = db.configuration
            connection.statementCache = true
            let pool = ConnectionPool(configuration: .init(connection: connection, maxConnections: 1))
            let database = Database(pool: pool)
            let device = try DeviceID(UUID())
            let devices = DeviceRepository(database: database)
            let logs = PoopLogRepository(database: database)
            let sync = SyncRepository(database: database)
            let users = UserRepository(database: database)
            _ = try await devices.register(DeviceInfo(), as: device)
            _ = try await devices.register(DeviceInfo(model: "again"), as: device)
            _ = try await devices.current(as: device)
            let id = UUID()
            let new = NewPoopLog(id: id, occurredAt: Date(timeIntervalSince1970: 1_700_000_000), bristolType: 3, notes: "n")
            _ = try await logs.create(new, as: device)
            _ = try await logs.create(new, as: device)  // the replay's branch
            for number in 0..<3 { _ = try await logs.create(NewPoopLog(occurredAt: Date(timeIntervalSince1970: Double(1_700_000_100 + number)), bristolType: 4), as: device) }
            let first = try await logs.list(limit: 2, as: device)
            _ = try await logs.list(before: first.nextCursor, limit: 2, as: device)
            _ = try await logs.get(id, as: device)
            _ = try await logs.update(id, PoopLogPatch(bristolType: 5), as: device)
            let other = UUID()
            _ = try await sync.push([.upsert(id: other, occurredAt: Date(timeIntervalSince1970: 1_700_000_200), bristolType: 2, notes: nil, baseVersion: nil),
                                     .upsert(id: id, occurredAt: new.occurredAt, bristolType: 6, notes: "changed", baseVersion: nil),
                                     .delete(id: other)], as: device)
            let page = try await sync.pull(cursor: nil, limit: 2, as: device)
            _ = try await sync.pull(cursor: page.cursor, limit: 2, as: device)
            _ = try await DeviceExport(database: database, batchSize: 2).run(as: device) { _ in }
            let subject = UUID()
            _ = try await users.ensureProfileAndLink(as: device, id: subject, email: "shard@example.com")
            _ = try await users.find(id: subject, as: device)
            _ = try await logs.delete(id, as: device)

            let statements = try await pool.withConnection { conn in
                try conn.query("SELECT statement FROM pg_prepared_statements").map { try $0.decode(0, as: String.self) }
            }
            #expect(statements.count > 15)
            func mentions(_ text: String, _ table: String) -> Bool {
                text.range(of: "\\b\(table)\\b", options: .regularExpression) != nil
            }
            /// `column = $n` (optionally qualified), for every mention of the column compared with anything.
            func names(_ text: String, _ column: String) -> Bool {
                let compared = try? Regex("(^|[^a-z_.])([a-z]\\.)?\(column) = ([^ ,)]+)")
                guard let compared else { return false }
                let values = text.matches(of: compared).map { String($0.output[3].substring ?? "") }
                return !values.isEmpty && values.allSatisfy { $0.hasPrefix("$") }
            }
            var checked = 0
            for statement in statements {
                let text = statement.lowercased()
                // The profile, rotation and erasure functions find their device themselves (app.device_id).
                if text.contains("poopypals_") { continue }
                let inserts = text.hasPrefix("insert")
                // The device's stored id (sql/0021), bound as a value (sql/0030: what routes a statement on Citus), never
                // found by its key in the statement.
                #expect(!text.contains("key"), "\(statement)")
                if mentions(text, "poop_logs") || mentions(text, "poop_log_tombstones") {
                    checked += 1
                    #expect(names(text, "device_id") || (inserts && text.contains("(id, device_id, ") && text.contains("values ($1, $2")),
                            "\(statement)")
                }
                if mentions(text, "devices") && !mentions(text, "users") {
                    checked += 1
                    #expect(names(text, "id"), "\(statement)")
                }
                if mentions(text, "users") {
                    checked += 1
                    #expect(text.contains("from devices d where d.id = $"), "\(statement)")
                }
            }
            #expect(checked > 12)
            await pool.close()
        }
    }
}
