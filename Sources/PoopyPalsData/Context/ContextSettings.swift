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

    init(_ timeouts: RequestTimeouts, quotas: DeviceQuotas = .default, rates: RateLimits = .default) {
        statement = RequestTimeouts.milliseconds(timeouts.statement)
        lock = RequestTimeouts.milliseconds(timeouts.lock)
        idleInTransaction = RequestTimeouts.milliseconds(timeouts.idleInTransaction)
        maxLogs = String(quotas.maxLogs)
        maxTombstones = String(quotas.maxTombstones)
        writeBurst = String(rates.writeBurst)
        writeRate = String(rates.writesPerSecond)
    }

    static let `default` = ContextSettings(.default)
}
