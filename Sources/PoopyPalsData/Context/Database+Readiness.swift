import PostgresClient

extension Database {
    /// Readiness: one round trip that does what every request does first (begin, switch to the service role,
    /// commit) and asks whether the node takes writes, on `probe` (the service's own connection for probes),
    /// bounded by a 2 s statement timeout and a 3 s deadline the client enforces (a hung node cannot hold the
    /// probe). A read-only node (a standby, or a primary demoted by a switchover, reached through a pooler or a
    /// connection made before) is not ready: its connection is dropped, so the next probe connects afresh, to the
    /// writable host if any.
    /// - Throws: `DatabaseFailure` (`.unavailable(.readOnly)` for a node that takes no writes), never a driver error.
    public func checkReadiness(on probe: ConnectionPool? = nil) async throws(DatabaseFailure) {
        let pool = probe ?? self.pool
        let writable: Bool
        do {
            writable = try await pool.withConnection(limits: .within(.seconds(3))) { connection -> Bool in
                let results = try connection.pipeline([
                    "BEGIN",
                    """
                    SELECT set_config('statement_timeout', '2000', true), set_config('role', \(Database.serviceRole), true), \
                    current_setting('transaction_read_only') = 'off' AS writable
                    """,
                    "COMMIT",
                ])
                let writable = try results[1][0].decode("writable", as: Bool.self)
                if !writable { connection.discardAfterUse() }
                return writable
            }
        } catch {
            throw DatabaseFailure(classifying: error) ?? .unavailable(.other)
        }
        guard writable else { throw .unavailable(.readOnly) }
    }

    /// True when the service's login is a superuser or has BYPASSRLS: every policy is then ignored, FORCEd or
    /// not (`RLSAudit` reports the same among its checks). Nil when it could not be asked.
    public static func loginBypassesRowLevelSecurity(on pool: ConnectionPool) async -> Bool? {
        try? await pool.withConnection { connection in
            try connection.query("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
                .first?.decode(0, as: Bool.self)
        }
    }
}
