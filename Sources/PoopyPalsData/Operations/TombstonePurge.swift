import PostgresClient

/// Deletes sync tombstones older than the retention and remembers, per device, up to which change number they
/// are gone, so that a cursor from before gets 410 instead of silently missing deletes.
public struct TombstonePurge: Sendable {
    public static let defaultDays = 90
    public static let allowedDays = 1...3650

    public struct Report: Sendable, Equatable {
        public let tombstonesPurged: Int
        public let devicesAffected: Int
    }

    public let days: Int

    public init(days: Int = TombstonePurge.defaultDays) {
        self.days = days
    }

    /// One transaction. Row-level security is forced on both tables and the maintenance login owns them: it is
    /// lifted inside this transaction only (the ALTERs lock both tables until the commit, which is quick).
    /// - Throws: `PostgresError`; `InvalidField("days")` outside 1…3650.
    public func run(on connection: Connection) throws -> Report {
        guard Self.allowedDays.contains(days) else { throw InvalidField("days", "must be between 1 and 3650") }
        return try connection.transaction { conn in
            // One statement each: Citus sends a DDL statement's text to the shards, and refused the two in one text
            // ("cannot insert multiple commands into a prepared statement"): the purge failed on a distributed database.
            try conn.executeScript("ALTER TABLE poop_log_tombstones NO FORCE ROW LEVEL SECURITY")
            try conn.executeScript("ALTER TABLE devices NO FORCE ROW LEVEL SECURITY")
            let row = try conn.query("""
                WITH purged AS (
                    DELETE FROM poop_log_tombstones WHERE deleted_at < now() - make_interval(days => \(days))
                    RETURNING device_id, change_seq
                ), horizons AS (
                    SELECT device_id, max(change_seq) AS seq, count(*) AS n FROM purged GROUP BY device_id
                ), moved AS (
                    -- The purged tombstones stop counting against the device's quota (sql/0014).
                    UPDATE devices d SET purged_through_seq = greatest(d.purged_through_seq, h.seq),
                                         tombstone_count = greatest(0, d.tombstone_count - h.n)
                    FROM horizons h WHERE d.id = h.device_id RETURNING d.id
                )
                SELECT (SELECT count(*) FROM purged)::int AS tombstones, (SELECT count(*) FROM moved)::int AS devices
                """)[0]
            try conn.executeScript("ALTER TABLE poop_log_tombstones FORCE ROW LEVEL SECURITY")
            try conn.executeScript("ALTER TABLE devices FORCE ROW LEVEL SECURITY")
            return Report(tombstonesPurged: try row.decode("tombstones"), devicesAffected: try row.decode("devices"))
        }
    }
}
