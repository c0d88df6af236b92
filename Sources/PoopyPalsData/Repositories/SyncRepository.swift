import Foundation
import PostgresClient

/// One change in a device's stream: a log as it now is, or the id of a deleted one.
public enum SyncChange: Sendable, Equatable {
    case upsert(PoopLog)
    case delete(UUID)
}

/// A page of changes, in the order they became visible.
public struct SyncPage: Sendable {
    public let changes: [SyncChange]
    /// Pass back as `cursor`; always present (the same cursor when nothing changed).
    public let cursor: String
    public let hasMore: Bool
}

/// One operation of a push.
public enum SyncOperation: Sendable, Equatable {
    /// Creates or replaces the log; with `baseVersion`, only if the stored log is still at that version.
    case upsert(id: UUID, occurredAt: Date, bristolType: Int, notes: String?, baseVersion: Int64?)
    case delete(id: UUID)

    var id: UUID {
        switch self {
        case .upsert(let id, _, _, _, _), .delete(let id): id
        }
    }
}

public enum SyncResult: String, Sendable, Equatable {
    case created, updated, unchanged, deleted, notFound
}

/// What a push answers: one result per operation, in order, and the cursor to pull with next.
public struct SyncPushOutcome: Sendable {
    public let results: [(UUID, SyncResult)]
    /// The puller's cursor, carrying the push's commit position when reads may go to a standby.
    public let cursor: String
}

/// The sync protocol over the change counter of sql/0009 (see the comment there for why it never skips a
/// change): pull pages of changes after a cursor; push a batch of operations in one transaction.
public struct SyncRepository: Sendable {
    public static let pageSizes = 1...500
    public static let batchSizes = 1...500

    let database: Database

    public init(database: Database) {
        self.database = database
    }

    /// Changes after `cursor` (nil: from the beginning), at most `limit`, fewer when they would not fit in
    /// `PageBytes.budget` (long notes; `hasMore` then says so): one round trip.
    /// - Throws: `InvalidField("cursor" | "limit")`; `SyncError.cursorExpired` when tombstones the cursor had not
    ///   seen were purged (pull again from the beginning).
    ///
    /// A read pool serves the pull only if it has replayed as far as `consistency` and the position the cursor
    /// carries (the later of the two); the returned cursor carries that position on while there are more pages,
    /// and drops it once the page reaches the end (everything up to it has then been seen).
    public func pull(cursor: String?, limit: Int, as device: DeviceID, consistency: ConsistencyToken? = nil) async throws -> SyncPage {
        guard Self.pageSizes.contains(limit) else { throw InvalidField("limit", "must be between 1 and 500") }
        let from = try cursor.map { encoded throws(InvalidField) in try SyncCursor(encoded: encoded) }
        let after = from?.sequence ?? 0
        let consistency = [consistency, from?.position].compactMap { $0 }.max()
        let (purged, rows) = try await database.asDevice(device, idempotent: true, readOnly: true, consistency: consistency) { tx in
            let result = try tx.finalQuery(Self.pullQuery(of: try tx.storedID(), after: after, fetch: limit + 1))
            let purged = try result.first?.decode("purged", as: Int64?.self) ?? 0
            var changes: [(Int64, SyncChange)] = []
            let (opColumn, seqColumn) = (try result.column(named: "op"), try result.column(named: "seq"))
            let columns = try PoopLog.Columns(result)
            for row in result.prefix(limit + 1) {  // rows past limit + 1 (`PageFetch` rounds up) are not decoded
                guard let op = try row.decode(opColumn, as: String?.self) else { continue }
                let seq: Int64 = try row.decode(seqColumn)
                changes.append((seq, op == "delete" ? .delete(try row.decode(columns.id)) : .upsert(try PoopLog(row: row, columns: columns))))
            }
            return (purged, changes)
        }
        // From the beginning (0) is always complete: every live log is there, and deletes need no telling.
        if after > 0, after < purged { throw SyncError.cursorExpired }
        let sizes = rows.prefix(limit).lazy.map { change -> Int in
            if case .upsert(let log) = change.1 { log.responseSizeBound } else { 128 }
        }
        let page = rows.prefix(PageBytes.countFitting(sizes))
        let last = page.last?.0 ?? after
        let hasMore = rows.count > page.count
        return SyncPage(changes: page.map(\.1), cursor: SyncCursor(sequence: last, position: hasMore ? consistency : nil).encoded,
                        hasMore: hasMore)
    }

    /// Changes after `after`, at least `fetch` of them (`PageFetch`), with the device's purge mark on every row (and
    /// on one row of NULLs when there are none). Each side of the union takes its own first rows from its
    /// `(device_id, change_seq)` index before they are merged: PostgreSQL 15 and 18 (the two we test on) plan a
    /// top-level `UNION ALL … ORDER BY … LIMIT` as read everything, then sort, which made a page cost the device's
    /// whole history after the cursor (1 000 logs: 1 030 buffers and 800 pages/s at 1 M rows, against 4 600/s
    /// with the inner limits).
    static func pullQuery(of device: UUID?, after: Int64, fetch: Int) -> PostgresQuery {
        let rows = PageFetch.rows(atLeast: fetch)
        let statement = pullStatements.first { $0.rows == rows }?.sql ?? makePullStatement(rows: rows)
        return PostgresQuery(unsafeSQL: statement, binds: [device, after]).withBinaryResults()
    }

    /// The pull's statement for each of `PageFetch.sizes`, made once (interpolated, it was 5 values bound and
    /// 14 appends a request): `$1` is the device's stored id, `$2` the sequence the page starts after.
    static let pullStatements = PageFetch.sizes.map { (rows: $0, sql: makePullStatement(rows: $0)) }

    static func makePullStatement(rows: Int) -> String {
        """
        WITH changes AS (
            (SELECT 'upsert'::text AS op, l.change_seq AS seq, l.id, l.occurred_at, l.bristol_type, l.notes,
                    l.created_at, l.updated_at, l.change_seq AS version
             FROM poop_logs l WHERE l.device_id = $1 AND l.change_seq > $2 ORDER BY l.change_seq LIMIT \(rows))
            UNION ALL
            (SELECT 'delete', t.change_seq, t.id, NULL, NULL, NULL, NULL, NULL, NULL
             FROM poop_log_tombstones t WHERE t.device_id = $1 AND t.change_seq > $2
             ORDER BY t.change_seq LIMIT \(rows))
            ORDER BY 2 LIMIT \(rows)
        )
        SELECT (SELECT d.purged_through_seq FROM devices d WHERE d.id = $1) AS purged, c.*
        FROM (SELECT 1) AS one LEFT JOIN changes c ON true ORDER BY c.seq
        """
    }

    /// Applies `operations` in order, in one transaction: all or nothing. Last writer wins in server order;
    /// an upsert with `baseVersion` fails the whole batch when the log has moved on.
    ///
    /// Answers, besides the results, `cursor` (the puller's own, or the beginning when nil) carrying the position
    /// the push's COMMIT reached when reads may go to a standby: a pull with it sees the push, with no header.
    /// - Throws: before anything is sent, `InvalidField("operations" | "cursor")` or
    ///   `SyncError.invalidOperation(index, field)`; `SyncError.versionConflict(index)`; `RepositoryError.logIDInUse` when an id belongs to another device;
    ///   `.deviceNotRegistered`.
    public func push(_ operations: [SyncOperation], as device: DeviceID, continuing cursor: String? = nil) async throws -> SyncPushOutcome {
        let from = try cursor.map { encoded throws(InvalidField) in try SyncCursor(encoded: encoded) } ?? SyncCursor(sequence: 0)
        // The request's own recorder when the HTTP layer set one (its Consistency-Token is then the same position).
        let recorder = RequestTrace.commits ?? CommitRecorder()
        let results = try await RequestTrace.$commits.withValue(recorder) { try await applyBatch(operations, as: device) }
        let position = [from.position, recorder.token].compactMap { $0 }.max()
        return SyncPushOutcome(results: results, cursor: SyncCursor(sequence: from.sequence, position: position).encoded)
    }

    private func applyBatch(_ operations: [SyncOperation], as device: DeviceID) async throws -> [(UUID, SyncResult)] {
        guard Self.batchSizes.contains(operations.count) else { throw InvalidField("operations", "must hold 1 to 500 operations") }
        let operations = operations.map { operation in
            guard case .upsert(let id, let occurredAt, let bristolType, let notes, let baseVersion) = operation else { return operation }
            return SyncOperation.upsert(id: id, occurredAt: PoopLog.storedTime(occurredAt), bristolType: bristolType,
                                        notes: PoopLog.storedNotes(notes), baseVersion: baseVersion)
        }
        for (index, operation) in operations.enumerated() {
            guard case .upsert(_, let occurredAt, let bristolType, let notes, let baseVersion) = operation else { continue }
            do {
                try PoopLogRepository.validate(occurredAt: occurredAt, bristolType: bristolType, notes: notes)
            } catch {
                throw SyncError.invalidOperation(index: index, error)
            }
            if let baseVersion, baseVersion < 0 {
                throw SyncError.invalidOperation(index: index, InvalidField("baseVersion", "must not be negative"))
            }
        }
        do {
            return try await database.asDevice(device, idempotent: true) { tx in
                var results: [(UUID, SyncResult)] = []
                results.reserveCapacity(operations.count)
                for (index, operation) in operations.enumerated() {
                    results.append((operation.id, try Self.apply(operation, index: index, in: tx)))
                }
                return results
            }
        } catch SQLState.foreignKeyViolation {
            throw RepositoryError.deviceNotRegistered
        }
    }

    private static func apply(_ operation: SyncOperation, index: Int, in tx: DeviceTransaction) throws -> SyncResult {
        switch operation {
        case .delete(let id):
            let stored = try tx.storedID()
            return try tx.execute("DELETE FROM poop_logs WHERE device_id = \(stored) AND id = \(id)") == 1 ? .deleted : .notFound
        case .upsert(let id, let occurredAt, let bristolType, let notes, let baseVersion):
            // No device of this key: as `PoopLogRepository.create` (on Citus the locking read below, naming no shard,
            // and the insert, a NULL distribution column, fail otherwise).
            guard let stored = try tx.storedID() else { throw RepositoryError.deviceNotRegistered }
            // Locked, so that the comparison and the write see the same row.
            let select: PostgresQuery = "SELECT \(unescaped: PoopLog.columns) FROM poop_logs WHERE device_id = \(stored) AND id = \(id) FOR UPDATE"
            let current: PoopLog
            if let locked = try tx.query(select).first.map(PoopLog.init(row:)) {
                current = locked
            } else {
                let inserted = try tx.query("""
                    INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes)
                    VALUES (\(id), \(stored), \(occurredAt), \(bristolType), \(notes))
                    ON CONFLICT (device_id, id) DO NOTHING RETURNING id
                    """)
                if !inserted.isEmpty {
                    if let baseVersion, baseVersion != 0 { throw SyncError.versionConflict(index: index) }
                    return .created
                }
                // The other phone created it meanwhile (visible now, to this new statement; ids are the device's
                // own, sql/0018), unless it deleted it again at once: the client pushes this operation again.
                guard let raced = try tx.query(select).first.map(PoopLog.init(row:)) else { throw SyncError.logIDInUse(index: index) }
                current = raced
            }
            // Already as asked: unchanged, whatever baseVersion says. So a push replayed after its COMMIT went
            // unanswered (a failover) is recognised instead of failing on the version its first attempt made.
            if PoopLogRepository.sameContent(current, NewPoopLog(id: id, occurredAt: occurredAt, bristolType: bristolType, notes: notes)) {
                return .unchanged
            }
            if let baseVersion, baseVersion != current.version { throw SyncError.versionConflict(index: index) }
            try tx.execute("""
                UPDATE poop_logs SET occurred_at = \(occurredAt), bristol_type = \(bristolType), notes = \(notes), updated_at = now()
                WHERE device_id = \(stored) AND id = \(id)
                """)
            return .updated
        }
    }
}

public enum SyncError: Error, Sendable, Equatable {
    /// Deletes after the cursor were purged: pull again from the beginning.
    case cursorExpired
    /// The log of operation `index` is no longer at its `baseVersion`; nothing of the batch was applied.
    case versionConflict(index: Int)
    /// Operation `index` holds a value that cannot be stored, named by the operation's own field (`occurredAt`,
    /// `bristolType`, `notes`, `baseVersion`); nothing was sent.
    case invalidOperation(index: Int, InvalidField)
    /// Operation `index` met its id changing under it (created and deleted by another phone of this device at that
    /// moment); nothing of the batch was applied: push again.
    case logIDInUse(index: Int)
}

/// Where a puller is: the device's change number it has seen, opaque to clients; and, while a page of changes it
/// must see may be on its way to a standby, the WAL position the next pull needs (a push's commit, or a
/// `Consistency-Token`), so that push-then-pull sees the push with no header. `s1|<seq>` or `s2|<seq>|<16 hex>`,
/// base64url.
struct SyncCursor: Sendable, Equatable {
    let sequence: Int64
    /// A standby serves the next pull only if it has replayed this far (else the primary does).
    let position: ConsistencyToken?

    init(sequence: Int64, position: ConsistencyToken? = nil) {
        self.sequence = sequence
        self.position = position
    }

    /// - Throws: `InvalidField(field, …)` for anything this code did not produce.
    init(encoded: String, field: String = "cursor") throws(InvalidField) {
        guard encoded.utf8.count <= 64, let bytes = Base64URL.decode(encoded) else { throw InvalidField(field, "is not a valid cursor") }
        let parts = bytes.split(separator: UInt8(ascii: "|"), omittingEmptySubsequences: false)
        func digits(_ part: ArraySlice<UInt8>, hex: Bool) -> Bool {
            !part.isEmpty && part.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || hex && (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
        }
        switch (parts.count, parts.first.map(Array.init)) {
        case (2, Array("s1".utf8)?), (3, Array("s2".utf8)?):
            guard parts[1].count <= 19, digits(parts[1], hex: false),
                  let sequence = Int64(String(decoding: parts[1], as: UTF8.self))
            else { throw InvalidField(field, "is not a valid cursor") }
            self.sequence = sequence
            if parts.count == 3 {
                guard parts[2].count == 16, digits(parts[2], hex: true),
                      let position = UInt64(String(decoding: parts[2], as: UTF8.self), radix: 16)
                else { throw InvalidField(field, "is not a valid cursor") }
                self.position = ConsistencyToken(position: position)
            } else {
                self.position = nil
            }
        default:
            throw InvalidField(field, "is not a valid cursor")
        }
    }

    var encoded: String {
        guard let position else { return Base64URL.encode(Array("s1|\(sequence)".utf8)) }
        return Base64URL.encode(Array("s2|\(sequence)|\(position.encoded.dropFirst(3))".utf8))
    }
}
