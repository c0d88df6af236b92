import Foundation
import PostgresClient
import Testing
import TestSupport

@Suite("Server errors and transactions")
struct ErrorAndTransactionTests {
    static let schema = """
        CREATE TABLE people (id int PRIMARY KEY, email text NOT NULL CONSTRAINT people_email_key UNIQUE,
          age int CONSTRAINT people_age_check CHECK (age >= 0))
        """

    @Test func uniqueAndCheckViolationsCarrySQLStateAndConstraint() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript(Self.schema)
                try conn.execute("INSERT INTO people VALUES (1, \("chris@example.com"), 30)")
                let unique = #expect(throws: PostgresError.self) {
                    try conn.execute("INSERT INTO people VALUES (2, \("chris@example.com"), 31)")
                }
                #expect(unique?.sqlState == .uniqueViolation)
                #expect(unique?.constraint == "people_email_key")
                #expect(unique?.table == "people")
                #expect(unique?.detail?.contains("chris@example.com") == true)
                #expect(unique.map { String(describing: $0) }?.contains("chris@example.com") == false)

                let check = #expect(throws: PostgresError.self) {
                    try conn.execute("INSERT INTO people VALUES (3, \("x@example.com"), \(-1))")
                }
                #expect(check?.sqlState == .checkViolation)
                #expect(check?.constraint == "people_age_check")

                let syntax = #expect(throws: PostgresError.self) { try conn.execute("SELEC 1") }
                #expect(syntax?.sqlState == .syntaxError)
                #expect(syntax?.position == 1)
            }
        }
    }

    @Test func transactionCommitsOnReturnAndRollsBackOnThrowRethrowingTheBodyError() async throws {
        struct Boom: Error {}
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript(Self.schema)
                let value = try conn.transaction { conn in
                    try conn.execute("INSERT INTO people VALUES (1, 'a@x.io', 1)")
                    return 42
                }
                #expect(value == 42)
                #expect(throws: Boom.self) {
                    try conn.transaction { conn in
                        try conn.execute("INSERT INTO people VALUES (2, 'b@x.io', 1)")
                        throw Boom()
                    }
                }
                #expect(try conn.query("SELECT count(*) FROM people")[0].decode(0, as: Int.self) == 1)
                #expect(conn.transactionState == .idle)
            }
        }
    }

    @Test func swallowedServerErrorCannotMasqueradeAsACommit() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript(Self.schema)
                let error = #expect(throws: TransactionError.self) {
                    try conn.transaction { conn in
                        try conn.execute("INSERT INTO people VALUES (1, 'a@x.io', 1)")
                        _ = try? conn.execute("INSERT INTO people VALUES (1, 'dup@x.io', 1)")
                    }
                }
                #expect(error?.phase == .commit)
                #expect(try conn.query("SELECT count(*) FROM people")[0].decode(0, as: Int.self) == 0)
            }
        }
    }

    @Test func commitFailureNamesTheCommitPhaseAndKeepsTheSQLState() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript("""
                    CREATE TABLE tokens (v int, CONSTRAINT tokens_v_key UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)
                    """)
                let error = #expect(throws: TransactionError.self) {
                    try conn.transaction { conn in
                        try conn.execute("INSERT INTO tokens VALUES (1), (1)")
                    }
                }
                #expect(error?.phase == .commit)
                #expect(error.map { SQLState.uniqueViolation ~= $0 } == true)
                let nested = #expect(throws: TransactionError.self) {
                    try conn.transaction { conn in try conn.transaction { _ in } }
                }
                #expect(nested?.phase == .begin)
            }
        }
    }

    /// A batch with no BEGIN is one implicit transaction, committed at its Sync; when that commit fails (here a
    /// deferred constraint), libpq hands the error over after every statement's result. It is the commit's error,
    /// with its SQLSTATE, and the connection stays in use, idle (before, the batch was abandoned and the connection
    /// with it, as if the server had broken the protocol).
    @Test func anErrorAtTheSyncIsTheImplicitCommitsAndLeavesTheConnectionIdle() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript("""
                    CREATE TABLE tokens (v int, CONSTRAINT tokens_v_key UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)
                    """)
                let context: PostgresQuery = "SELECT set_config('statement_timeout', '5s', true)"
                let error = #expect(throws: TransactionError.self) {
                    try conn.pipelineResults([context, "INSERT INTO tokens VALUES (1), (1)"])
                }
                #expect(error?.phase == .commit)
                #expect(error.map { SQLState.uniqueViolation ~= $0 } == true)
                #expect(conn.isOpen)
                #expect(conn.transactionState == .idle)
                // Nothing of the batch took effect; the statements it prepared run again.
                #expect(try conn.query("SELECT count(*) FROM tokens")[0].decode(0, as: Int.self) == 0)
                let results = try conn.pipelineResults([context, "INSERT INTO tokens VALUES (1), (2)"])
                #expect(results.count == 2)
                #expect(try results[1].get().rowsAffected == 2)
                #expect(try conn.query("SELECT count(*) FROM tokens")[0].decode(0, as: Int.self) == 2)
            }
        }
    }

    @Test func savepointContainsAUniqueViolationAndTheTransactionGoesOn() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript(Self.schema)
                try conn.transaction { conn in
                    try conn.execute("INSERT INTO people VALUES (1, 'a@x.io', 1)")
                    let conflict = #expect(throws: PostgresError.self) {
                        try conn.savepoint { conn in try conn.execute("INSERT INTO people VALUES (2, 'a@x.io', 1)") }
                    }
                    #expect(conflict?.sqlState == .uniqueViolation)
                    #expect(conn.transactionState == .inTransaction)
                    try conn.savepoint { conn in try conn.execute("INSERT INTO people VALUES (3, 'c@x.io', 1)") }
                }
                let ids = try conn.query("SELECT id FROM people ORDER BY id").map { try $0.decode(0, as: Int.self) }
                #expect(ids == [1, 3])
                #expect(throws: TransactionError.self) { try conn.savepoint { _ in } }
            }
        }
    }

    @Test func pipelineRunsAllStatementsAndReportsTheFirstFailure() async throws {
        try await TestDatabase.with { db in
            try await db.withConnection { conn in
                try conn.executeScript(Self.schema)
                let results = try conn.pipeline([
                    "BEGIN",
                    "INSERT INTO people VALUES (\(1), \("a@x.io"), \(1))",
                    "SELECT email FROM people WHERE id = \(1)",
                    "COMMIT",
                ])
                #expect(results.count == 4)
                #expect(try results[2][0].decode("email", as: String.self) == "a@x.io")

                let error = #expect(throws: PostgresError.self) {
                    try conn.pipeline([
                        "INSERT INTO people VALUES (2, 'b@x.io', 1)",
                        "INSERT INTO people VALUES (3, 'a@x.io', 1)",
                        "INSERT INTO people VALUES (4, 'd@x.io', 1)",
                    ])
                }
                #expect(error?.sqlState == .uniqueViolation)
                // One implicit transaction: the failure undid the first insert and skipped the last.
                #expect(try conn.query("SELECT count(*) FROM people")[0].decode(0, as: Int.self) == 1)
                #expect(conn.transactionState == .idle)
            }
        }
    }

    @Test(arguments: [true, false])
    func statementsArePreparedOncePerConnectionWhenCaching(_ caching: Bool) async throws {
        try await TestDatabase.with { db in
            var configuration = db.configuration
            configuration.statementCache = caching
            let pool = ConnectionPool(configuration: .init(connection: configuration, maxConnections: 1))
            let counts = try await pool.withConnection { conn in
                try (0..<3).map { i -> Int in
                    try conn.query("SELECT \(i)::int AS i")
                    return try conn.query("SELECT count(*)::int FROM pg_prepared_statements")[0].decode(0, as: Int.self)
                }
            }
            await pool.close()
            #expect(counts == (caching ? [2, 2, 2] : [0, 0, 0]))
        }
    }
}
