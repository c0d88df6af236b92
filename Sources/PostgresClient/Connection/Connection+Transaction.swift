extension Connection {
    /// Transaction isolation levels.
    public enum IsolationLevel: String, Sendable {
        case readCommitted = "READ COMMITTED"
        case repeatableRead = "REPEATABLE READ"
        case serializable = "SERIALIZABLE"
    }

    /// Runs `body` in a transaction: commits when it returns, rolls back when it throws.
    ///
    /// An error from `body` is rethrown as is after the rollback. If `body` caught a server error and returned
    /// anyway, the transaction is dead on the server; it is rolled back and this throws instead of pretending
    /// to commit (PostgreSQL would answer COMMIT with a silent ROLLBACK).
    /// - Throws: the body's error; `TransactionError` naming the phase when begin, commit or rollback fails.
    @discardableResult
    public func transaction<T>(
        isolation: IsolationLevel? = nil, _ body: (Connection) throws -> T
    ) throws -> T {
        guard transactionState == .idle else {
            throw TransactionError(phase: .begin, underlying: PostgresClientError(.unsupported,
                "a transaction is already open on this connection; use savepoint(_:) to nest"))
        }
        do {
            try executeScript(isolation.map { "BEGIN ISOLATION LEVEL \($0.rawValue)" } ?? "BEGIN")
        } catch {
            throw TransactionError(phase: .begin, underlying: error)
        }
        return try finishTransaction(body: body, commit: "COMMIT", rollback: "ROLLBACK")
    }

    /// Runs `body` inside a savepoint of the current transaction: a failure in `body` (a unique violation, say)
    /// is rolled back to the savepoint and rethrown, and the enclosing transaction stays usable.
    /// - Throws: the body's error; `TransactionError` when no transaction is open or the savepoint commands fail.
    @discardableResult
    public func savepoint<T>(_ body: (Connection) throws -> T) throws -> T {
        guard transactionState == .inTransaction else {
            throw TransactionError(phase: .begin, underlying: PostgresClientError(.unsupported,
                "savepoint(_:) needs an open, healthy transaction"))
        }
        savepointDepth += 1
        defer { savepointDepth -= 1 }
        let name = "poopypals_sp_\(savepointDepth)"
        do {
            try executeScript("SAVEPOINT \(name)")
        } catch {
            throw TransactionError(phase: .begin, underlying: error)
        }
        return try finishTransaction(
            body: body, commit: "RELEASE SAVEPOINT \(name)",
            rollback: "ROLLBACK TO SAVEPOINT \(name); RELEASE SAVEPOINT \(name)")
    }

    private func finishTransaction<T>(body: (Connection) throws -> T, commit: String, rollback: String) throws -> T {
        let value: T
        do {
            value = try body(self)
        } catch {
            // A lost connection needs no rollback: the server ends the transaction itself.
            guard isOpen else { throw error }
            do {
                try executeScript(rollback)
            } catch let rollbackError {
                throw TransactionError(phase: .rollback, underlying: rollbackError, bodyError: error)
            }
            throw error
        }
        if transactionState == .failed {
            let swallowed = PostgresClientError(.unsupported,
                "a statement failed inside the transaction and its error was caught; the work was rolled back")
            do {
                try executeScript(rollback)
            } catch {
                throw TransactionError(phase: .rollback, underlying: error, bodyError: swallowed)
            }
            throw TransactionError(phase: .commit, underlying: swallowed)
        }
        do {
            try executeScript(commit)
        } catch {
            throw TransactionError(phase: .commit, underlying: error)
        }
        return value
    }
}
