import PostgresClient

extension Database {
    /// Readiness: one round trip that does what every request does first (begin, switch to the service role,
    /// commit) and asks whether the node takes writes, on `probe` (the service's own connection for probes),
    /// bounded by a 2 s statement timeout and a 3 s deadline the client enforces (a hung node cannot hold the
    /// probe). A read-only node (a standby, or a primary demoted by a switchover, reached through a pooler or a
    /// connection made before) is not ready: its connection is dropped, so the next probe connects afresh, to the
    /// writable host if any. A probe whose connection was lost under it (its server process terminated, the
    /// server restarted) asks once more, on a fresh connection, within the same deadline: the old session's end
    /// says nothing about the node.
    /// - Throws: `DatabaseFailure` (`.unavailable(.readOnly)` for a node that takes no writes), never a driver error.
    /// - Parameter deadline: the probe's 3 s by default (tests on a loaded machine give more).
    public func checkReadiness(on probe: ConnectionPool? = nil, within deadline: Duration = .seconds(3)) async throws(DatabaseFailure) {
        let pool = probe ?? self.pool
        let limits = RoundTripLimits.within(deadline)
        var writable = false
        for attempt in 1...2 {
            do {
                writable = try await pool.withConnection(limits: attempt == 1 ? limits : RoundTripLimits(deadline: limits.deadline)) { connection -> Bool in
                    let results = try connection.pipeline([
                        "BEGIN",
                        """
                        SELECT set_config('statement_timeout', '2000', true), set_config('role', \(unescaped: ServiceRoles.serviceRoleSQL), true), \
                        current_setting('transaction_read_only') = 'off' AS writable
                        """,
                        "COMMIT",
                    ])
                    let writable = try results[1][0].decode("writable", as: Bool.self)
                    if !writable { connection.discardAfterUse() }
                    return writable
                }
                break
            } catch {
                if attempt == 1, Self.lostTheSession(error), let deadline = limits.deadline,
                   deadline &- RoundTripWatch.now() > 500_000_000 {
                    continue
                }
                throw DatabaseFailure(classifying: error) ?? .unavailable(.other)
            }
        }
        guard writable else { throw .unavailable(.readOnly) }
    }

    /// True when `error` ended the session rather than answered the question: the connection was lost, or the
    /// server ended this session (terminated, shutting down, crashed: 57P01, 57P02, 57P03).
    static func lostTheSession(_ error: any Error) -> Bool {
        if let server = PostgresError.find(in: error) {
            return server.sqlState.meansTheNodeIsUnfit && server.sqlState != .readOnlySQLTransaction
        }
        return PostgresClientError.find(in: error)?.kind == .connectionLost
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

extension Database {
    /// The primary's archiving figures for `/metrics` (`ArchiveStatus`), on `probe` like readiness, within 2 s:
    /// a scrape must answer even when the database does not. Nil when the check could not be made (a standby,
    /// unreachable, too slow).
    public func archiveStatus(on probe: ConnectionPool? = nil) async -> ArchiveStatus? {
        let pool = probe ?? self.pool
        return try? await pool.withConnection(limits: RoundTripLimits.within(.seconds(2))) { connection in
            try ArchiveStatus.read(on: connection)
        }
    }
}
