import PostgresClient

/// What the request transaction's context statement sets, as its `set_config` calls take it (text), made once per
/// `Database`: the time limits of `RequestTimeouts` in whole milliseconds (formatting the three durations was 2 k
/// instructions on every request), the device's quotas (sql/0014) and its write bucket (sql/0015).
struct ContextSettings: Sendable {
    let statement: String
    let lock: String
    let idleInTransaction: String
    let maxLogs: String
    let maxTombstones: String
    let writeBurst: String
    let writeRate: String
    /// A write transaction's context statement also calls `poopypals_require_synchronous_standby()` (sql/0039): a
    /// server without a synchronous standby refuses it (25006) before anything is written.
    let requiresSynchronousStandby: Bool
    /// On a Citus coordinator, the statements that carry these settings to the workers, in the request's pipeline
    /// after the context statement (docs/scaling.md, "Sharding by device", step 4): a worker never sees what
    /// `set_config` set, only `SET LOCAL` statements made while `citus.propagate_set_commands` is `local`. Their
    /// text is constant for a deployment (numbers of our own configuration), so each is prepared once per
    /// connection like any other statement; the device's key, which varies, is added per request as a one-off.
    let carried: [PostgresQuery]

    init(_ timeouts: RequestTimeouts, quotas: DeviceQuotas = .default, rates: RateLimits = .default,
         requiresSynchronousStandby: Bool = false) {
        self.requiresSynchronousStandby = requiresSynchronousStandby
        statement = RequestTimeouts.milliseconds(timeouts.statement)
        lock = RequestTimeouts.milliseconds(timeouts.lock)
        idleInTransaction = RequestTimeouts.milliseconds(timeouts.idleInTransaction)
        maxLogs = String(quotas.maxLogs)
        maxTombstones = String(quotas.maxTombstones)
        writeBurst = String(rates.writeBurst)
        writeRate = String(rates.writesPerSecond)
        // Whole milliseconds and counts of our own configuration; quoted as a literal all the same (a quote doubled).
        let carriedValues = [("statement_timeout", statement), ("lock_timeout", lock),
                             ("idle_in_transaction_session_timeout", idleInTransaction),
                             ("poopypals.max_logs_per_device", maxLogs), ("poopypals.max_tombstones_per_device", maxTombstones),
                             ("poopypals.device_write_burst", writeBurst), ("poopypals.device_write_rate", writeRate)]
        carried = [PostgresQuery(unsafeSQL: "SET LOCAL citus.propagate_set_commands = 'local'")] + carriedValues.map { name, value in
            PostgresQuery(unsafeSQL: "SET LOCAL \(name) = '\(value.replacingOccurrences(of: "'", with: "''"))'")
        }
    }

    static let `default` = ContextSettings(.default)
}
