import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport
import Values

/// What PostgreSQL does with the page queries once a device has a long history: the plan, not the answer (the
/// answers are covered beside the repositories). Both defects here were found by the benchmark's scaling table.
@Suite("Page queries at scale")
struct QueryPlanTests {
    static let history = 3_000

    /// One device with `history` logs (change numbers 1…history, one minute apart), statistics fresh.
    private static func seed(_ db: TestDatabase, _ database: Database) async throws -> DeviceID {
        let device = try DeviceID(UUID())
        _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: device)
        try await db.seedLogs(deviceKey: device.key, count: history)
        try await db.withConnection { conn in try conn.executeScript("ANALYZE poop_logs; ANALYZE poop_log_tombstones") }
        return device
    }

    /// A pool of one session with the statement cache on, so that the session's prepared statements can be read.
    private static func singleSession(_ db: TestDatabase) -> ConnectionPool {
        var connection = db.configuration
        connection.statementCache = true
        return ConnectionPool(configuration: .init(connection: connection, maxConnections: 1))
    }

    /// The largest row count any node of the plan produced, from `EXPLAIN (ANALYZE, FORMAT JSON)` of `query` run
    /// as `device` in the request transaction.
    /// With `generic`, the plan PostgreSQL caches for the statement (`force_generic_plan`: parameters unknown to
    /// the planner), through a statement prepared for the purpose (parameter types from the context, values as
    /// literals) and deallocated before the transaction ends.
    private static func mostRowsOfAnyNode(_ query: PostgresQuery, as device: DeviceID, database: Database,
                                          generic: Bool = false) async throws -> Int {
        let json = try await database.asDevice(device) { tx in
            guard generic else {
                let explain = PostgresQuery(unsafeSQL: "EXPLAIN (ANALYZE, FORMAT JSON) " + query.sql, binds: query.binds.map { $0 ?? "" })
                return try tx.finalQuery(explain).first?.decode(0, as: String.self)
            }
            let name = "plan_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            let values = query.binds.map { "'" + ($0 ?? "").replacingOccurrences(of: "'", with: "''") + "'" }.joined(separator: ", ")
            _ = try tx.query(PostgresQuery(unsafeSQL: "PREPARE \(name) AS " + query.sql))
            _ = try tx.query("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
            let text = try tx.query(PostgresQuery(unsafeSQL: "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE \(name)(\(values))")).first?.decode(0, as: String.self)
            _ = try tx.finalQuery(PostgresQuery(unsafeSQL: "DEALLOCATE \(name)"))
            return text
        }
        let text = try #require(json)
        let plans = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]])
        func most(_ node: [String: Any]) -> Int {
            let own = ((node["Actual Rows"] as? NSNumber)?.intValue ?? 0) * ((node["Actual Loops"] as? NSNumber)?.intValue ?? 1)
            return ((node["Plans"] as? [[String: Any]]) ?? []).map(most).reduce(own, max)
        }
        return most(try #require(plans.first?["Plan"] as? [String: Any]))
    }

    /// The defect: a `UNION ALL … ORDER BY … LIMIT` at the top of the changes query is planned as "read every
    /// change after the cursor, then sort", so the first page of a device with 3 000 logs read all 3 000 (and a
    /// full sync read the history once per page). This failed before the inner limits: 3 000 rows out of a node.
    @Test func aSyncPageReadsThePageNotTheDevicesHistory() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let device = try await Self.seed(db, database)
            let logs = PoopLogRepository(database: database)
            let sync = SyncRepository(database: database)
            // More deletes than a page holds, alternating with updates, so that both sides of the union have more
            // rows than the page and their change numbers interleave.
            let newest = try await logs.list(limit: 200, as: device).items.map(\.id)
            for (deleted, updated) in zip(newest.prefix(30), newest.dropFirst(30).prefix(30)) {
                #expect(try await logs.delete(deleted, as: device))
                #expect(try await logs.update(updated, PoopLogPatch(bristolType: 2), as: device) != nil)
            }
            let deleted = Set(newest.prefix(30))

            let stored = try await database.asDevice(device, readOnly: true) { try $0.storedID() }
            for after in [Int64(0), 1_500, 3_000] {
                let query = SyncRepository.pullQuery(of: stored, after: after, fetch: 21)
                // A page's worth, not the history: PostgreSQL may still read a small side whole (the 30 tombstones)
                // and sort it, so the bound is a few pages, against 3 000.
                let rows = try await Self.mostRowsOfAnyNode(query, as: device, database: database)
                #expect(rows <= 100, "a node produced \(rows) rows for a page of 21 after \(after)")
                // The plan PostgreSQL keeps after five executions: the generic one, with the cursor unknown.
                let generic = try await Self.mostRowsOfAnyNode(query, as: device, database: database, generic: true)
                #expect(generic <= 100, "the generic plan produced \(generic) rows after \(after)")
            }

            // The pages hold every change once, in change order (40 asked, 51 fetched: the extra rows trimmed; 3 000
            // changes make exactly 75 full pages, and the last one says there is no more).
            let expected = try await database.asDevice(device) { tx in
                try tx.finalQuery("""
                    SELECT id, change_seq FROM poop_logs UNION ALL SELECT id, change_seq FROM poop_log_tombstones ORDER BY 2
                    """).map { try $0.decode(0, as: UUID.self) }
            }
            #expect(expected.count == Self.history)
            var cursor: String? = nil
            var pulled: [UUID] = []
            var deletes: Set<UUID> = []
            var pages: [SyncPage] = []
            while pages.count < 200 {
                let page = try await sync.pull(cursor: cursor, limit: 40, as: device)
                pages.append(page)
                for change in page.changes {
                    switch change {
                    case .upsert(let log): pulled.append(log.id)
                    case .delete(let id): pulled.append(id); deletes.insert(id)
                    }
                }
                cursor = page.cursor
                if !page.hasMore { break }
            }
            #expect(pulled == expected)
            #expect(deletes == deleted)
            #expect(pages.count == 75)
            #expect(pages.allSatisfy { $0.changes.count == 40 })
        }
    }

    /// Issue 57: a read that checks a kept id itself (the page as a lateral subquery of one row, a LEFT JOIN) still
    /// reads the page, not the device's history, and needs no sort: its rows come in the page's order. Custom and
    /// generic plans, first page and a later one, over 3 000 logs.
    @Test func aPageThatChecksAKeptIdReadsOnlyThePage() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let device = try await Self.seed(db, database)
            let stored = try await database.asDevice(device, readOnly: true) { try $0.storedID() }
            let cursor = LogCursor(occurredAt: Date(), id: UUID())
            for position in [nil, cursor] {
                let query = PoopLogRepository.listQuery(of: stored, after: position, fetch: 21, checkingKeptID: true)
                #expect(query.sql.contains("LEFT JOIN LATERAL"))
                let rows = try await Self.mostRowsOfAnyNode(query, as: device, database: database)
                #expect(rows <= 21, "a node produced \(rows) rows for a page of 21")
                let generic = try await Self.mostRowsOfAnyNode(query, as: device, database: database, generic: true)
                #expect(generic <= 21, "the generic plan produced \(generic) rows")
                let plan = try await database.asDevice(device) { tx in
                    try tx.finalQuery(PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds.map { $0 ?? "" })).map { try $0.decode(0, as: String.self) }
                }
                #expect(plan.joined().contains("Nested Loop Left Join") && !plan.joined().contains("Sort"), "\(plan.joined(separator: "\n"))")
            }
            let page = try await database.asDevice(device, readOnly: true) { tx in
                let result = try tx.finalQuery(PoopLogRepository.listQuery(of: stored, after: nil, fetch: 51, checkingKeptID: true))
                return try PoopLog.decode(result, of: result)
            }
            #expect(page.count == 51)
            #expect(zip(page, page.dropFirst()).allSatisfy { $0.occurredAt > $1.occurredAt })
        }
    }

    /// The defect: with `LIMIT $n` PostgreSQL judged the generic plan dearer (it assumes a tenth of the device's
    /// rows come back) and planned "list newest" again on every request once a device had a long history. This
    /// failed before the literal limits: 16 custom plans and no generic one for the first page.
    @Test func listingNewestKeepsOnePlanForADeviceWithALongHistory() async throws {
        try await TestDatabase.withMigrated { db in
            let pool = Self.singleSession(db)
            let database = Database(pool: pool)
            let device = try await Self.seed(db, database)
            let logs = PoopLogRepository(database: database)
            let first = try await logs.list(limit: 20, as: device)
            let cursor = try #require(first.nextCursor)
            for _ in 0..<15 {
                #expect(try await logs.list(limit: 20, as: device).items == first.items)
                #expect(try await logs.list(before: cursor, limit: 20, as: device).items.count == 20)
            }
            let plans = try await pool.withConnection { conn in
                try conn.query("""
                    SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
                    WHERE statement LIKE '%FROM poop_logs%ORDER BY occurred_at DESC, id DESC LIMIT%'
                      AND statement NOT LIKE '%pg_prepared_statements%'
                    """).map { (try $0.decode(0, as: String.self), try $0.decode(1, as: Int64.self), try $0.decode(2, as: Int64.self)) }
            }
            #expect(plans.count == 2, "the first page and the page after a cursor: \(plans.map(\.0))")
            for (statement, generic, custom) in plans {
                // PostgreSQL tries five custom plans for a statement with parameters before it compares.
                #expect(generic >= 8 && custom <= 5, "\(generic) generic, \(custom) custom plans: \(statement)")
            }

            // Paging still returns every log once, newest first, when more rows are fetched than asked (150 → 201).
            // 3 000 logs make exactly 20 full pages: the last one has no next cursor.
            var seen: [PoopLog] = []
            var before: String? = nil
            var pages = 0
            repeat {
                let page = try await logs.list(before: before, limit: 150, as: device)
                #expect(page.items.count == 150)
                seen += page.items
                before = page.nextCursor
                pages += 1
            } while before != nil && pages <= 25
            #expect(pages == 20)
            #expect(seen.count == Self.history)
            #expect(Set(seen.map(\.id)).count == Self.history)
            #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.occurredAt > $1.occurredAt })
            await pool.close()
        }
    }

    @Test func pageFetchSizesCoverEveryPageSizeWithSixStatements() throws {
        var used = Set<Int>()
        var statements = Set<String>()
        let device = UUID()
        let cursor = LogCursor(occurredAt: Date(timeIntervalSince1970: 1_800_000_000), id: UUID())
        for rows in 1...501 {
            let fetch = PageFetch.rows(atLeast: rows)
            #expect(fetch >= rows && fetch < rows * 11 + 1)
            used.insert(fetch)
            // The statements made once per size are those made for the size: its literal LIMIT, values bound.
            let first = PoopLogRepository.listQuery(of: device, after: nil, fetch: rows)
            let after = PoopLogRepository.listQuery(of: device, after: cursor, fetch: rows)
            let pull = SyncRepository.pullQuery(of: device, after: 7, fetch: rows)
            #expect(first.sql.hasSuffix("LIMIT \(fetch)") && first.binds.count == 1 && first.binaryResults)
            #expect(after.sql.hasSuffix("LIMIT \(fetch)") && after.binds.count == 3 && after.binaryResults)
            #expect(pull.sql.contains("ORDER BY 2 LIMIT \(fetch)\n") && pull.binds == [UUIDText.lowercase(device), "7"] && pull.binaryResults)
            // And those that check a kept id (issue 57): the same page inside, the same values.
            let firstChecking = PoopLogRepository.listQuery(of: device, after: nil, fetch: rows, checkingKeptID: true)
            let afterChecking = PoopLogRepository.listQuery(of: device, after: cursor, fetch: rows, checkingKeptID: true)
            #expect(firstChecking.sql.contains("LIMIT \(fetch)) AS page ON true") && firstChecking.binds == first.binds && firstChecking.binaryResults)
            #expect(afterChecking.sql.contains("LIMIT \(fetch)) AS page ON true") && afterChecking.binds == after.binds && afterChecking.binaryResults)
            statements.formUnion([first.sql, after.sql, pull.sql, firstChecking.sql, afterChecking.sql])
        }
        #expect(used.count == 6)
        #expect(statements.count == 30)
        // Every page size the repositories accept (plus the one row that tells whether more follow) has its size.
        #expect(PageFetch.sizes.last ?? 0 >= PoopLogRepository.pageSizes.upperBound + 1)
        #expect(PageFetch.sizes.last ?? 0 >= SyncRepository.pageSizes.upperBound + 1)
        #expect(PageFetch.rows(atLeast: 21) == 21 && PageFetch.rows(atLeast: 51) == 51 && PageFetch.rows(atLeast: 22) == 51)
    }
}
