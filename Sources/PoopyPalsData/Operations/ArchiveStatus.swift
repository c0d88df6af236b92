import PostgresClient

/// Is continuous archiving keeping up? Read from the primary's `pg_stat_archiver` (issue 43): a cron job pages an
/// operator before a failing or stalled archive turns a mistake into one that cannot be undone.
public struct ArchiveStatus: Sendable, Encodable, Equatable {
    /// `archive_mode`: `off`, `on` or `always`.
    public let archiveMode: String
    public let archivedCount: Int64
    public let lastArchivedWAL: String?
    /// Seconds since the last segment was archived; nil when none ever was.
    public let secondsSinceLastArchived: Double?
    public let failedCount: Int64
    /// True when the last attempt failed (a failure newer than the last success).
    public let failing: Bool
    /// Whole WAL segments written and not yet archived (the one being written is not counted); nil when unknown
    /// (nothing archived yet, or the last archived file is a timeline history).
    public let segmentsWaiting: Int64?

    /// The last archived segment's number against the one being written, in SQL: WAL file names are the timeline,
    /// then the segment number as two 32-bit halves (high part counted in 4 GiB / segment size). The current
    /// segment is the WAL position divided by the segment size, rounded down (numeric division rounds on a cast).
    static let sql = """
        WITH a AS (SELECT * FROM pg_catalog.pg_stat_archiver),
             s AS (SELECT setting::bigint AS size FROM pg_catalog.pg_settings WHERE name = 'wal_segment_size')
        SELECT pg_catalog.pg_is_in_recovery() AS standby, current_setting('archive_mode') AS mode,
               a.archived_count, a.last_archived_wal,
               extract(epoch FROM now() - a.last_archived_time)::float8 AS since,
               a.failed_count,
               coalesce(a.last_failed_time > coalesce(a.last_archived_time, '-infinity'), false) AS failing,
               CASE WHEN NOT pg_catalog.pg_is_in_recovery() AND a.last_archived_wal ~ '^[0-9A-F]{24}'
                    THEN floor(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), '0/0') / s.size)::bigint
                         - (('x' || substr(a.last_archived_wal, 9, 8))::bit(32)::bigint * (4294967296 / s.size)
                            + ('x' || substr(a.last_archived_wal, 17, 8))::bit(32)::bigint) - 1
               END AS waiting
        FROM a, s
        """

    public enum ReadError: Error, CustomStringConvertible {
        case standby
        public var description: String {
            "this server is a standby: archiving is the primary's (connect with target_session_attrs=read-write)"
        }
    }

    /// One round trip (a `/metrics` scrape runs it).
    public static func read(on connection: Connection) throws -> ArchiveStatus {
        let row = try connection.query(PostgresQuery(unsafeSQL: sql))[0]
        if try row.decode("standby", as: Bool.self) { throw ReadError.standby }
        return ArchiveStatus(
            archiveMode: try row.decode("mode", as: String.self),
            archivedCount: try row.decode("archived_count", as: Int64.self),
            lastArchivedWAL: try row.decode("last_archived_wal", as: String?.self),
            secondsSinceLastArchived: try row.decode("since", as: Double?.self),
            failedCount: try row.decode("failed_count", as: Int64.self),
            failing: try row.decode("failing", as: Bool.self),
            segmentsWaiting: try row.decode("waiting", as: Int64?.self))
    }

    /// What an operator must hear about: archiving off, the last attempt failed, or finished segments waiting while
    /// nothing was archived for longer than `maxLag` seconds. An idle server (nothing waiting) is fine however long
    /// ago its last segment went.
    public func problems(maxLag seconds: Double) -> [String] {
        var found: [String] = []
        if archiveMode == "off" { found.append("archive_mode is off: nothing written is archived, no point-in-time recovery") }
        if failing { found.append("the last archive attempt failed (\(failedCount) failures so far; see the server log)") }
        if let waiting = segmentsWaiting, waiting > 0 {
            let since = secondsSinceLastArchived.map { Int($0.rounded()) }
            if since.map({ Double($0) > seconds }) ?? true {
                found.append("\(waiting) finished WAL segment\(waiting == 1 ? "" : "s") not archived, the last archived "
                             + (since.map { "\($0) s ago" } ?? "never") + " (limit \(Int(seconds)) s)")
            }
        }
        return found
    }
}
