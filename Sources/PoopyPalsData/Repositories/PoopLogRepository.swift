import Foundation
import PostgresClient
import Values

/// A new log. `id` is optional and client-generated, so that a retried upload is recognised.
public struct NewPoopLog: Sendable, Equatable {
    public var id: UUID?
    public var occurredAt: Date
    public var bristolType: Int
    public var notes: String?

    /// `occurredAt` is kept to the whole second and empty notes are no notes (see `PoopLog.stored…`).
    public init(id: UUID? = nil, occurredAt: Date, bristolType: Int, notes: String? = nil) {
        self.id = id
        self.occurredAt = PoopLog.storedTime(occurredAt)
        self.bristolType = bristolType
        self.notes = PoopLog.storedNotes(notes)
    }
}

/// Changes to a log; nil leaves a field as it is.
public struct PoopLogPatch: Sendable, Equatable {
    public enum Notes: Sendable, Equatable { case set(String), clear }

    public var occurredAt: Date?
    public var bristolType: Int?
    public var notes: Notes?

    /// `occurredAt` is kept to the whole second; `.set("")` clears, as `.clear` does.
    public init(occurredAt: Date? = nil, bristolType: Int? = nil, notes: Notes? = nil) {
        self.occurredAt = occurredAt.map(PoopLog.storedTime)
        self.bristolType = bristolType
        self.notes = notes == .set("") ? .clear : notes
    }

    var isEmpty: Bool { occurredAt == nil && bristolType == nil && notes == nil }
}

/// One page of logs, newest first.
public struct PoopLogPage: Sendable {
    public let items: [PoopLog]
    /// Pass as `before` to get the next page; nil on the last page.
    public let nextCursor: String?
}

/// The calling device's logs. Every statement runs under the device context, so another device's log
/// behaves exactly like a missing one; no `WHERE device_id` is needed for safety.
public struct PoopLogRepository: Sendable {
    public static let pageSizes = 1...200

    let database: Database

    public init(database: Database) {
        self.database = database
    }

    /// Creates a log; a retry with the same id and content returns the existing row (`created == false`).
    /// New logs and replays cost one round trip.
    /// - Throws: `InvalidField` before anything is sent; `RepositoryError.logIDInUse` when the id exists with
    ///   other content; `RepositoryError.deviceNotRegistered`.
    public func create(_ new: NewPoopLog, as device: DeviceID) async throws -> (log: PoopLog, created: Bool) {
        try Self.validate(occurredAt: new.occurredAt, bristolType: new.bristolType, notes: new.notes)
        let id = new.id ?? UUIDText.random()
        let inserted: PoopLog?
        do {
            inserted = try await database.asDevice(device, idempotent: true) { tx in
                // No device of this key: nothing to insert. Said here, not by the insert's error: on plain PostgreSQL
                // that is a foreign key's (23503, below), on Citus a NULL distribution column's (22004), which was a 500.
                // A kept id is checked by the insert itself (its trigger), not by a statement before it.
                guard let stored = try tx.storedID(checkedBy: .theInsert) else { throw RepositoryError.deviceNotRegistered }
                do {
                    return try tx.finalQuery(
                        PostgresQuery(unsafeSQL: Self.createStatement, binds: [id, stored, new.occurredAt, new.bristolType, new.notes])
                            .withBinaryResults()
                    ).first.map(PoopLog.init(row:))
                } catch let error where tx.keptIDUnchecked && PostgresError.find(in: error)?.sqlState == .insufficientPrivilege {
                    throw StaleKeptID()
                }
            }
        } catch SQLState.foreignKeyViolation {
            throw RepositoryError.deviceNotRegistered
        }
        if let inserted { return (inserted, true) }
        // The id was taken: by a first attempt of this upload (its answer lost), by a concurrent one the insert waited
        // for, or by another log. Read in a transaction of its own, after the insert's committed: it sees the row that
        // held the id then, unless it was deleted since. On the primary (not read-only, which a read pool would take:
        // a standby may not have the row yet). Until issue 57 every create read its row back in the insert's round trip,
        // which cost PostgreSQL about 137 000 instructions of 1 245 000 (callgrind) for the rare repeated upload.
        let existing = try await database.asDevice(device, idempotent: true) { tx in
            guard let stored = try tx.storedID() else { throw RepositoryError.deviceNotRegistered }
            return try tx.finalQuery(Self.getQuery(id, of: stored)).first.map(PoopLog.init(row:))
        }
        // Nothing: the row that held the id was deleted since.
        guard let existing, Self.sameContent(existing, new) else { throw RepositoryError.logIDInUse }
        return (existing, false)
    }

    /// `create`'s insert (`getQuery` follows it only when it inserted nothing). Made once: interpolated, it was 12 appends and
    /// 7 placeholders a request (7 k instructions); its values are bound as `$1` to `$5` (id, the device's stored id,
    /// occurred at, Bristol type, notes). Until the one-shard test refused it, one statement did both, the insert in a
    /// CTE and the existing row read in a `UNION ALL`: Citus runs such a statement in steps (the insert on the worker,
    /// its row gathered on the coordinator and sent back for the rest), three round trips to the worker.
    static let createStatement = """
        INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (device_id, id) DO NOTHING
        RETURNING \(PoopLog.columns)
        """

    /// Newest first after `position`, at least `fetch` rows (`PageFetch`: a literal LIMIT, possibly more rows).
    /// `checkingKeptID`: the statement checks the device's kept id when it finds no row (`checkingKeptID(_:)`).
    static func listQuery(of device: UUID?, after position: LogCursor?, fetch: Int, checkingKeptID: Bool = false) -> PostgresQuery {
        let rows = PageFetch.rows(atLeast: fetch)
        let statements = listStatements.first { $0.rows == rows } ?? makeListStatements(rows: rows)
        let query = switch (position, checkingKeptID) {
        case (let position?, false): PostgresQuery(unsafeSQL: statements.after, binds: [device, position.occurredAt, position.id])
        case (let position?, true): PostgresQuery(unsafeSQL: statements.afterChecking, binds: [device, position.occurredAt, position.id])
        case (nil, false): PostgresQuery(unsafeSQL: statements.first, binds: [device])
        case (nil, true): PostgresQuery(unsafeSQL: statements.firstChecking, binds: [device])
        }
        // Binary: 20 rows are 60 timestamps and 20 UUIDs neither printed by the server nor parsed here.
        return query.withBinaryResults()
    }

    /// `list`'s statements for each of `PageFetch.sizes`, made once (interpolated, they were about 4 k
    /// instructions a request): the first page binds the device's stored id as `$1`; a later one binds the cursor's
    /// time and id as `$2` and `$3` too.
    static let listStatements = PageFetch.sizes.map(makeListStatements(rows:))

    static func makeListStatements(rows: Int) -> (rows: Int, first: String, after: String, firstChecking: String, afterChecking: String) {
        let first = """
            SELECT \(PoopLog.columns) FROM poop_logs WHERE device_id = $1
            ORDER BY occurred_at DESC, id DESC LIMIT \(rows)
            """
        let after = """
            SELECT \(PoopLog.columns) FROM poop_logs
            WHERE device_id = $1 AND (occurred_at, id) < ($2, $3)
            ORDER BY occurred_at DESC, id DESC LIMIT \(rows)
            """
        return (rows, first, after, checkingKeptID(first), checkingKeptID(after))
    }

    /// A read (a page, a log) that also checks the device's kept id (`$1`), only when it finds no row: the read is the
    /// one-row outer side's lateral subquery (a nested loop over one row, whose rows come in the subquery's order: a
    /// join with no join clause has no other plan), and the row a LEFT JOIN makes when it found none is the one that
    /// calls `poopypals_device_is` (sql/0030: PPD01 when the key stands for another device or none, which `Database`
    /// takes for a stale id), only when the key's own id differs (`DeviceTransaction.keptIDCheck`), and is dropped. A
    /// row found under the kept id and the key's own policy proves the id current (issue 57: a GET without the
    /// context's check costs PostgreSQL about 295 000 instructions, 345 000 with it; least, the same read with only its
    /// key set, 305 000, callgrind).
    static func checkingKeptID(_ read: String) -> String {
        """
        SELECT page.* FROM (VALUES ($1::uuid)) AS one (device) LEFT JOIN LATERAL (\(read)) AS page ON true
        WHERE CASE WHEN page.id IS NOT NULL THEN true ELSE \(DeviceTransaction.keptIDCheck("$1")) END
        """
    }

    /// The log, or nil when it does not exist or belongs to another device.
    /// With `consistency`, never older than that write (see `ConsistencyToken`).
    public func get(_ id: UUID, as device: DeviceID, consistency: ConsistencyToken? = nil) async throws -> PoopLog? {
        try await database.asDevice(device, idempotent: true, readOnly: true, consistency: consistency) { tx in
            let stored = try tx.storedID(checkedBy: .theRead)
            return try tx.finalQuery(Self.getQuery(id, of: stored, checkingKeptID: tx.keptIDUnchecked)).first.map(PoopLog.init(row:))
        }
    }

    /// `checkingKeptID`: the statement checks the device's kept id when it finds no row (`checkingKeptID(_:)`).
    static func getQuery(_ id: UUID, of device: UUID?, checkingKeptID: Bool = false) -> PostgresQuery {
        PostgresQuery(unsafeSQL: checkingKeptID ? getCheckingStatement : getStatement, binds: [device, id]).withBinaryResults()
    }

    /// `getQuery`'s texts, made once, not interpolated per request (issue 59).
    static let getStatement = "SELECT \(PoopLog.columns) FROM poop_logs WHERE device_id = $1 AND id = $2"
    static let getCheckingStatement = checkingKeptID(getStatement)

    /// The statements a read sends for a device whose id this instance keeps (its steady state), as `make bench`'s
    /// pgbench side sends them: a log by `$1` (the stored id) and `$2`; the first page of 21 by `$1`.
    public static let keptIDReadStatements = (get: getCheckingStatement, list: makeListStatements(rows: 21).firstChecking)

    /// Logs newest first, `limit` at a time (1…200), fewer when they would not fit in `PageBytes.budget` (long
    /// notes); `before` is a `nextCursor` from an earlier page.
    /// - Throws: `InvalidField("limit" | "before", …)`.
    public func list(before cursor: String? = nil, limit: Int = 50, as device: DeviceID,
                     consistency: ConsistencyToken? = nil) async throws -> PoopLogPage {
        guard Self.pageSizes.contains(limit) else { throw InvalidField("limit", "must be between 1 and 200") }
        let position = try cursor.map(LogCursor.init(encoded:))
        let logs = try await database.asDevice(device, idempotent: true, readOnly: true, consistency: consistency) { tx in
            // One more than the limit tells whether a page follows; rows past limit + 1 (`PageFetch` rounds up) are not decoded.
            let stored = try tx.storedID(checkedBy: .theRead)
            let result = try tx.finalQuery(Self.listQuery(of: stored, after: position, fetch: limit + 1, checkingKeptID: tx.keptIDUnchecked))
            return try PoopLog.decode(result.prefix(limit + 1), of: result)
        }
        let fitting = PageBytes.countFitting(logs.prefix(limit).lazy.map(\.responseSizeBound))
        let items = Array(logs.prefix(fitting))
        let next = logs.count > fitting ? items.last.flatMap { LogCursor(occurredAt: $0.occurredAt, id: $0.id).encoded } : nil
        return PoopLogPage(items: items, nextCursor: next)
    }

    /// Applies `patch`; nil when the log does not exist or belongs to another device.
    /// - Throws: `InvalidField` for an empty patch or a bad value.
    public func update(_ id: UUID, _ patch: PoopLogPatch, as device: DeviceID) async throws -> PoopLog? {
        guard !patch.isEmpty else { throw InvalidField("body", "names no field to change") }
        let notes: String? = if case .set(let text) = patch.notes { text } else { nil }
        try Self.validate(occurredAt: patch.occurredAt, bristolType: patch.bristolType, notes: notes)
        return try await database.asDevice(device, idempotent: true) { tx in
            let stored = try tx.storedID()
            return try tx.finalQuery("""
                UPDATE poop_logs SET
                    occurred_at = COALESCE(\(patch.occurredAt)::timestamptz, occurred_at),
                    bristol_type = COALESCE(\(patch.bristolType)::smallint, bristol_type),
                    notes = CASE WHEN \(patch.notes != nil)::boolean THEN \(notes)::text ELSE notes END,
                    updated_at = now()
                WHERE device_id = \(stored) AND id = \(id)
                RETURNING \(unescaped: PoopLog.columns)
                """).first.map(PoopLog.init(row:))
        }
    }

    /// Deletes the log; false when it does not exist or belongs to another device.
    public func delete(_ id: UUID, as device: DeviceID) async throws -> Bool {
        try await database.asDevice(device, idempotent: true) { tx in
            let stored = try tx.storedID()
            return try tx.finalQuery("DELETE FROM poop_logs WHERE device_id = \(stored) AND id = \(id)").rowsAffected == 1
        }
    }

    static func validate(occurredAt: Date?, bristolType: Int?, notes: String?, now: Date = Date()) throws(InvalidField) {
        if let bristolType, !(1...7).contains(bristolType) { throw InvalidField("bristolType", "must be between 1 and 7") }
        if let notes, notes.unicodeScalars.count > PoopLog.notesLimit {
            throw InvalidField("notes", "is longer than \(PoopLog.notesLimit) characters")
        }
        if let occurredAt {
            guard occurredAt <= now.addingTimeInterval(86_400) else { throw InvalidField("occurredAt", "is more than a day in the future") }
            guard occurredAt >= Date(timeIntervalSince1970: 0) else { throw InvalidField("occurredAt", "is before 1970") }
        }
    }

    /// Same content as stored: the timestamp compared to the whole second (the stored precision, sql/0011), so
    /// that a log read from the API and sent again is a replay, not a conflict.
    static func sameContent(_ log: PoopLog, _ new: NewPoopLog) -> Bool {
        PoopLog.storedTime(log.occurredAt) == PoopLog.storedTime(new.occurredAt) && log.bristolType == new.bristolType
            && log.notes == PoopLog.storedNotes(new.notes)
    }
}

/// Where a page ends: the last log's time and id, opaque to clients.
struct LogCursor: Sendable, Equatable {
    let occurredAt: Date
    let id: UUID

    init(occurredAt: Date, id: UUID) {
        self.occurredAt = occurredAt
        self.id = id
    }

    /// - Throws: `InvalidField("before", …)` for anything this code did not produce.
    init(encoded: String) throws(InvalidField) {
        guard encoded.utf8.count <= 128, let bytes = Base64URL.decode(encoded),
              let text = String(validating: bytes, as: UTF8.self) else { throw InvalidField("before", "is not a valid cursor") }
        let parts = text.split(separator: "|")
        guard parts.count == 3, parts[0] == "v1", let micros = Int64(parts[1]), let id = UUIDText.parse(parts[2])
        else { throw InvalidField("before", "is not a valid cursor") }
        // Only what `encoded` can produce: a log's time, a whole second (sql/0011) never before 1970 (see
        // `validate`), which reads back as itself. `v1|253402300799999999|…` passed before and rounded, as a Date,
        // into year 10000, which the query could not bind (400 invalid_request instead of naming `before`).
        guard micros >= 0, micros % 1_000_000 == 0, let occurredAt = Date(microsecondsSince1970: micros),
              occurredAt.microsecondsSince1970 == micros else {
            throw InvalidField("before", "is not a valid cursor")
        }
        self.occurredAt = occurredAt
        self.id = id
    }

    /// nil only for a time outside years 1…9999, which no stored log has.
    var encoded: String? {
        guard let micros = occurredAt.microsecondsSince1970 else { return nil }
        return Base64URL.encode(Array("v1|\(micros)|\(UUIDText.lowercase(id))".utf8))
    }
}
