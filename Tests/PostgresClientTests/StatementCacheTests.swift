@testable import PostgresClient
import Testing
import TestSupport

/// The statement cache's key hashes a few words of a statement and compares all of its bytes.
@Suite("Statement cache")
struct StatementCacheTests {
    private func longSQL(middle: String) -> String {
        "SELECT " + String(repeating: "a, ", count: 40) + middle + String(repeating: ", b", count: 40) + " FROM t"
    }

    @Test func statementsThatDifferOnlyInTheMiddleAreDistinct() {
        var cache = StatementCache(capacity: 10)
        let first = longSQL(middle: "x1"), second = longSQL(middle: "y2")
        #expect(first.utf8.count == second.utf8.count && first.utf8.count > 128)
        cache.insert(first, name: "one", persists: false)
        #expect(cache.lookup(second) == nil)
        cache.insert(second, name: "two", persists: true)
        #expect(cache.lookup(first)?.name == "one")
        #expect(cache.lookup(second)?.name == "two")
        #expect(cache.lookup(second)?.persists == true)
        #expect(cache.count == 2)
    }

    /// Issue 59: the hash reads four words (the first 8 bytes, 8 from the middle, the last 16); two statements of
    /// one length that differ only elsewhere hash alike, and are still two statements.
    @Test func statementsThatHashAlikeAreStillDistinct() {
        var cache = StatementCache(capacity: 10)
        let first = longSQL(middle: "x1"), second = longSQL(middle: "x1").replacingOccurrences(of: "SELECT a, a", with: "SELECT a, c")
        #expect(first.utf8.count == second.utf8.count && first != second)
        #expect(Array(first.utf8.prefix(8)) == Array(second.utf8.prefix(8)))
        cache.insert(first, name: "one", persists: false)
        #expect(cache.lookup(second) == nil)
        cache.insert(second, name: "two", persists: false)
        #expect(cache.lookup(first)?.name == "one")
        #expect(cache.lookup(second)?.name == "two")
    }

    /// The server prepares bytes: a statement spelled with a composed é and one with e + U+0301 are two statements,
    /// though Swift's `==` calls the strings equal.
    @Test func statementsAreTheirBytesNotTheirCanonicalForm() {
        var cache = StatementCache(capacity: 10)
        let composed = "SELECT 'caf\u{E9}'", decomposed = "SELECT 'cafe\u{301}'"
        #expect(composed == decomposed)
        cache.insert(composed, name: "composed", persists: false)
        #expect(cache.lookup(decomposed) == nil)
        #expect(cache.lookup(String(decoding: Array(composed.utf8), as: UTF8.self))?.name == "composed")
        cache.insert("", name: "empty", persists: false)
        #expect(cache.lookup("")?.name == "empty")
    }

    @Test func theLeastRecentlyUsedStatementIsEvictedAndClosedLater() {
        var cache = StatementCache(capacity: 2)
        let a = longSQL(middle: "a"), b = longSQL(middle: "b"), c = longSQL(middle: "c")
        cache.insert(a, name: "A", persists: false)
        cache.insert(b, name: "B", persists: false)
        _ = cache.lookup(a)
        cache.insert(c, name: "C", persists: false)
        #expect(cache.lookup(b) == nil)
        #expect(cache.lookup(a)?.name == "A" && cache.lookup(c)?.name == "C")
        #expect(cache.namesToClose == ["B"])
        cache.evict(a)
        #expect(cache.lookup(a) == nil)
        #expect(cache.namesToClose == ["B", "A"])
    }

    /// On a live connection: each statement runs as its own text. With `String` keys, the second ran the first's
    /// prepared statement and answered 5.
    @Test func twoStatementsSwiftCallsEqualRunAsTheirOwnText() async throws {
        try await TestDatabase.with { db in
            // Read on the connection's thread, checked here: an expectation on that thread is not the test's.
            let lengths = try await db.withConnection { conn in
                (try conn.query("SELECT octet_length('caf\u{E9}') AS n")[0].decode("n", as: Int.self),
                 try conn.query("SELECT octet_length('cafe\u{301}') AS n")[0].decode("n", as: Int.self))
            }
            #expect(lengths.0 == 5)
            #expect(lengths.1 == 6)
        }
    }

    /// A one-off statement (text that changes with every call, such as a `SET LOCAL` of a validated literal) runs
    /// in a pipeline with cached ones, and neither enters the cache nor stays prepared on the server: a thousand
    /// of them leave the cache as one cached statement left it.
    @Test func aOneOffStatementIsNeverCachedNorKeptOnTheServer() async throws {
        try await TestDatabase.with { db in
            let (cached, prepared, values) = try await db.withConnection { conn in
                try conn.query("SELECT 1 AS warm")
                let before = conn.cachedStatementCount
                var values: [Int] = []
                for n in 1...1000 {
                    let results = try conn.pipelineResults([
                        "BEGIN",
                        PostgresQuery(unsafeSQL: "SET LOCAL application_name = 'one-off \(n)'").asOneOff(),
                        "SELECT current_setting('application_name') AS name",
                        "COMMIT",
                    ])
                    let name = try results[2].get()[0].decode("name", as: String.self)
                    values.append(Int(name.dropFirst("one-off ".count)) ?? -1)
                }
                let cached = conn.cachedStatementCount - before
                let prepared = try conn.query("SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement LIKE 'SET LOCAL%'")[0]
                    .decode("n", as: Int.self)
                return (cached, prepared, values)
            }
            // BEGIN, the SELECT and COMMIT were new: three cached statements, none of them the SET LOCAL.
            #expect(cached == 3)
            #expect(prepared == 0)
            #expect(values == Array(1...1000))
        }
    }
}
