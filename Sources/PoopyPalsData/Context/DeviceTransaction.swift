import Foundation
import PostgresClient
import Values

/// The transaction of one request made as one device, handed to the work closure of `Database.asDevice`.
///
/// Nothing is sent until the first statement: `BEGIN` and the context (service role and `app.device_id`,
/// both transaction-local) travel in the same pipeline as that statement, and `finalQuery` adds `COMMIT` to
/// its pipeline, so a request of one statement costs one network round trip. A request of one round trip sends neither
/// `BEGIN` nor `COMMIT` (`readsWithoutBegin`, `writesWithoutBegin`).
public final class DeviceTransaction {
    public let device: DeviceID
    let connection: Connection
    /// True when the transaction can change nothing.
    let readOnly: Bool
    /// Where the commit position goes (in the same round trip as the COMMIT), when reads may go to a standby.
    private let recorder: CommitRecorder?
    /// True while the prefix holds the standby freshness check (its answer is the prefix's third result).
    private var checksFreshness = false
    /// BEGIN and what follows the context; the context itself is made when the prefix is sent (`takePrefix(into:)`),
    /// with the check of a kept id in it when there is one to check by then.
    private var prefix: [PostgresQuery]?
    /// The context statement's text and its values ($1…$8).
    private let contextSQL: ContextSQL
    private let contextValues: [String?]
    /// True once COMMIT has been sent: from then on the outcome of a lost connection is unknown.
    private(set) var commitSent = false
    /// True after `finalQuery`: the transaction is over.
    private(set) var isFinished = false
    /// Where ids looked up are kept, and whence a kept one came.
    private let keptIDs: KeptDeviceIDs?
    /// Whether a kept id may be used: not on the attempt after a stale one (`Database`), which looks it up.
    private let trustsKept: Bool
    /// The device's stored id once known: kept or looked up; `.some(nil)`: no device.
    private var resolvedID: UUID??
    /// A kept id to check, with the next statement sent (`storedID()`).
    private var pendingCheck: UUID?
    /// The stored id is a kept one that no statement checked: the statement that follows checks it itself
    /// (`storedID(checkedBy:)`).
    private(set) var keptIDUnchecked = false
    /// The database is a Citus coordinator (the context is carried to the workers): a read checks a kept id in its
    /// context, not in its own statement (`storedID(checkedBy: .theRead)`).
    private let carried: Bool
    /// A read that begins in the round trip of its final statement sends only the context and its statements, no
    /// `BEGIN` and no `COMMIT` (issue 59: two of a GET's four statements, about 12 k instructions of our process in
    /// 293 k). The statements of one pipeline, up to its Sync, are one transaction of their own (PostgreSQL ends an
    /// implicit transaction at Sync, not after each statement), and the context's `set_config(…, true)` lasts until
    /// its end, as it lasts until COMMIT; the context makes it read-only itself (`transaction_read_only`, as BEGIN READ
    /// ONLY did). Only a plain read: not a snapshot (several round trips), not a read checked against a standby's
    /// position (its check is the prefix's third statement), not on Citus (its `SET LOCAL` statements warn outside
    /// a transaction block). A read commits nothing, so its outcome is never unknown, with or without a COMMIT.
    private let readsWithoutBegin: Bool
    /// A write that begins in the round trip of its final statement (a create, a delete, a registration: one statement)
    /// likewise sends no `BEGIN` and no `COMMIT` (issue 59: about 9 000 instructions of our process per POST, 218.8 k → 209.8 k, callgrind): its
    /// pipeline is its transaction, committed at the Sync. An error of that commit (a deferred constraint, a node that
    /// went down while the commit waited for its standby) comes back after the statement's own result, and
    /// `Connection.pipelineResults` throws it as `TransactionError` (phase `commit`), as an explicit COMMIT's; a
    /// connection lost once the pipeline is sent leaves the outcome unknown, as before (`commitSent`). Not when the
    /// commit's position is recorded (a read pool's `Consistency-Token`: `pg_current_wal_insert_lsn()` must be read
    /// after the commit, and inside the implicit transaction it would be read before), nor on Citus (its `SET LOCAL`
    /// statements warn outside a transaction block).
    private let writesWithoutBegin: Bool

    /// - Parameter snapshot: one read-only snapshot for every statement (REPEATABLE READ READ ONLY), for
    ///   work that reads in several round trips and must see one consistent state (an export).
    /// - Parameter readOnly: the server refuses any write (BEGIN READ ONLY), so a COMMIT left unanswered changed
    ///   nothing: such work is never of unknown outcome.
    /// - Parameter freshAt: on a standby, the transaction goes on only if the standby has replayed this far (checked
    ///   in the same round trip as the first statement); else `StaleStandby` is thrown. A primary is always fresh.
    /// - Parameter recorder: receives the position the COMMIT reached (a write's `Consistency-Token`).
    /// - Parameter carried: the database is a Citus coordinator: the context is also sent as `SET LOCAL`
    ///   statements, which Citus carries to the workers (`ContextSettings.carried`, and the device's key), in the
    ///   same pipeline.
    /// - Parameter keptIDs: the device's stored id, when kept there, is named by `storedID()` without a lookup and
    ///   checked before the next statement (`poopypals_device_is`, sql/0030: PPD01 when stale); one looked up is
    ///   kept there.
    /// - Parameter trustsKept: false: the id is looked up even when one is kept (and what it finds is kept).
    init(connection: Connection, device: DeviceID, settings: ContextSettings = .default, snapshot: Bool = false, readOnly: Bool = false,
         freshAt: ConsistencyToken? = nil, recorder: CommitRecorder? = nil, carried: Bool = false, keptIDs: KeptDeviceIDs? = nil,
         trustsKept: Bool = true) {
        self.connection = connection
        self.device = device
        self.readOnly = snapshot || readOnly
        self.recorder = snapshot || readOnly ? nil : recorder
        self.keptIDs = keptIDs
        self.trustsKept = trustsKept
        self.carried = carried
        var prefix: [PostgresQuery] = []
        prefix.reserveCapacity((freshAt == nil ? 2 : 3) + (carried ? settings.carried.count + 1 : 0))
        prefix.append(snapshot ? Self.beginSnapshot : readOnly ? Self.beginReadOnly : Self.begin)
        // set_config(…, true) is SET LOCAL: the role, the device and the time limits end with the transaction.
        // Every value is bound, never spliced in. The text is a constant: built once, not for every request.
        // (Only the Citus statements below splice values: our own numbers, and the key we print ourselves.)
        // The context goes in after BEGIN when the prefix is sent (`takePrefix(into:)`).
        readsWithoutBegin = readOnly && !snapshot && freshAt == nil && !carried
        writesWithoutBegin = !self.readOnly && self.recorder == nil && freshAt == nil && !carried
        contextSQL = readsWithoutBegin ? .readOnly
            : self.readOnly && !carried ? .readOnlyBegun
            : settings.requiresSynchronousStandby && !self.readOnly ? .onAStandbyFollowedServer : .plain
        // A read-only transaction writes nothing: the quotas and the write bucket, which only the log triggers read,
        // are not set (issue 57: about 39 000 fewer PostgreSQL instructions per GET, callgrind). A read of one round
        // trip is never idle inside its transaction (its pipeline is sent whole): no idle limit either.
        contextValues = switch contextSQL {
        case .readOnly: [UUIDText.lowercase(device.key), settings.statement, settings.lock]
        case .readOnlyBegun: [UUIDText.lowercase(device.key), settings.statement, settings.lock, settings.idleInTransaction]
        case .plain, .onAStandbyFollowedServer: [
            UUIDText.lowercase(device.key), settings.statement, settings.lock, settings.idleInTransaction,
            settings.maxLogs, settings.maxTombstones, settings.writeBurst, settings.writeRate,
        ]
        }
        if let freshAt {
            prefix.append("SELECT NOT pg_is_in_recovery() OR coalesce(pg_last_wal_replay_lsn() >= \(freshAt.lsn)::pg_lsn, false) AS fresh")
            checksFreshness = true
        }
        if carried {
            prefix.append(contentsOf: settings.carried)
            // SET LOCAL takes no parameter: the key is spliced in as a literal. It is a UUID we derived and print
            // ourselves (hex digits and hyphens only), never the client's text. One-off: a statement per device
            // would fill the statement cache.
            prefix.append(PostgresQuery(unsafeSQL: "SET LOCAL app.device_id = '\(UUIDText.lowercase(device.key))'").asOneOff())
        }
        self.prefix = prefix
    }

    /// The prefix as it is sent, appended to `batch`: BEGIN (unless `withoutBegin`), the context (checking a kept id
    /// when one is pending: `poopypals_device_is` evaluated after the context's `set_config` calls, in the same
    /// statement, issue 59: one statement fewer in every request's pipeline), then the rest. Returns how many
    /// statements it appended; nil once sent. (Appended in place: an array of its own, the context inserted into it
    /// and BEGIN removed again cost about 2 000 instructions a request.)
    private func takePrefix(into batch: inout [PostgresQuery], withoutBegin: Bool = false) -> Int? {
        guard let statements = prefix else { return nil }
        prefix = nil
        let start = batch.count
        if !withoutBegin { batch.append(statements[0]) }
        if let checks = pendingCheck {
            pendingCheck = nil
            var values = contextValues
            values.append(UUIDText.lowercase(checks))
            batch.append(PostgresQuery(unsafeSQL: contextSQL.text(checkingKeptID: true), textBinds: values))
        } else {
            batch.append(PostgresQuery(unsafeSQL: contextSQL.text(checkingKeptID: false), textBinds: contextValues))
        }
        batch.append(contentsOf: statements.dropFirst())
        return batch.count - start
    }

    /// A kept id's check on a transaction already begun (`runPipeline`); else it goes in the context.
    private static let checkKeptID = "SELECT " + keptIDCheck("$1")

    /// The check of a kept id bound as `parameter`: the key's id compared with it in the statement itself, and
    /// `poopypals_device_is` (which raises PPD01, sql/0030) called only when they differ: one PL/pgSQL call a request
    /// instead of two (issue 57: about 18 000 fewer PostgreSQL instructions per request, callgrind; a GET 403 k ->
    /// 384 k). NULL when the id is current (a read's own check, `PoopLogRepository.checkingKeptID`, drops its row on it).
    static func keptIDCheck(_ parameter: String) -> String {
        "CASE WHEN public.get_current_device_id() IS DISTINCT FROM \(parameter)::uuid THEN public.poopypals_device_is(\(parameter)::uuid) END"
    }
    private static let lookUpID: PostgresQuery = "SELECT get_current_device_id()"

    /// The device's stored id (`devices.id`), which the work's statements name: on Citus what routes a statement to
    /// the device's shard (sql/0030). nil when the key stands for no device (not registered, or being erased).
    ///
    /// Kept by this instance: no round trip; the next statement's pipeline checks it first, after the context, so that
    /// a stale one fails the transaction (PPD01) before that statement runs (`Database` then looks it up again and
    /// runs the work once more). Else looked up, in a round trip of its own (with the context when the transaction
    /// has not begun: a request's first statement then costs a second round trip), and kept.
    /// - Throws: as `query(_:)`.
    public func storedID() throws -> UUID? {
        try storedID(checkedBy: .theContext)
    }

    /// Who checks a kept id (`storedID(checkedBy:)`).
    enum KeptIDCheck {
        /// The context, before the next statement (`poopypals_device_is`): `storedID()`.
        case theContext
        /// The next statement, an insert into `poop_logs`: its row trigger (sql/0040) raises PPD01 when the key stands
        /// for no device, and 42501 when it stands for another (the row names a device that is not the key's, as
        /// row-level security would say); the work takes that 42501 for a stale id (`StaleKeptID`).
        case theInsert
        /// The next statement, a read that checks the id only when it finds no row (`PoopLogRepository`'s get and
        /// list): a row found under the kept id and the key's own policy proves the id current; none found calls
        /// `poopypals_device_is` in the statement (PPD01 when stale). On Citus the context checks it.
        case theRead
    }

    /// `storedID()`, with a kept id checked by `check` (issue 57: the check in the context is about 84 000 of a
    /// create's 1 107 000 PostgreSQL instructions and 77 000 of a GET's 345 000, callgrind). `keptIDUnchecked` says
    /// when the next statement must check it.
    func storedID(checkedBy check: KeptIDCheck) throws -> UUID? {
        if let resolvedID { return resolvedID }
        if trustsKept, let kept = keptIDs?.id(for: device.key) {
            switch check {
            case .theInsert: keptIDUnchecked = true
            case .theRead where !carried: keptIDUnchecked = true
            case .theContext, .theRead: pendingCheck = kept
            }
            resolvedID = .some(kept)
            return kept
        }
        let found = try run(Self.lookUpID, commit: false).first?.decode(0, as: UUID?.self) ?? nil
        resolvedID = .some(found)
        if let found { keptIDs?.keep(found, for: device.key) }
        return found
    }

    private static let begin: PostgresQuery = "BEGIN"
    private static let beginReadOnly: PostgresQuery = "BEGIN READ ONLY"
    private static let beginSnapshot: PostgresQuery = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    private static let commitStatement: PostgresQuery = "COMMIT"
    /// The request's context: this database's service role (sql/0022: a constant the plan folds in), the device,
    /// statement, lock and idle-in-transaction time limits ($1…$4), the device's quotas ($5, $6: sql/0014's triggers
    /// read them) and its write bucket ($7, $8: sql/0015's).
    private static let context = """
        SELECT set_config('role', \(ServiceRoles.serviceRoleSQL), true), set_config('app.device_id', $1, true), \
        set_config('statement_timeout', $2, true), \
        set_config('lock_timeout', $3, true), set_config('idle_in_transaction_session_timeout', $4, true), \
        set_config('poopypals.max_logs_per_device', $5, true), set_config('poopypals.max_tombstones_per_device', $6, true), \
        set_config('poopypals.device_write_burst', $7, true), set_config('poopypals.device_write_rate', $8, true)
        """

    /// The same, first making sure this server has a synchronous standby (sql/0039; `Database`'s
    /// `requiresSynchronousStandby`): for transactions that may write.
    private static let contextOnAStandbyFollowedServer = """
        SELECT public.poopypals_require_synchronous_standby(), \
        set_config('role', \(ServiceRoles.serviceRoleSQL), true), set_config('app.device_id', $1, true), \
        set_config('statement_timeout', $2, true), \
        set_config('lock_timeout', $3, true), set_config('idle_in_transaction_session_timeout', $4, true), \
        set_config('poopypals.max_logs_per_device', $5, true), set_config('poopypals.max_tombstones_per_device', $6, true), \
        set_config('poopypals.device_write_burst', $7, true), set_config('poopypals.device_write_rate', $8, true)
        """

    /// Each context, and each with a kept id's check last (the parameter after the context's values): PostgreSQL
    /// evaluates a target list in order, so the check sees the role and `app.device_id` set by the calls before it
    /// (KeptDeviceIDTests: a stale id still fails with PPD01 before the work runs).
    enum ContextSQL {
        /// `plain` and `onAStandbyFollowedServer`: a transaction that may write, with every setting. `readOnly`: a read
        /// of one round trip (`readsWithoutBegin`); `readOnlyBegun`: a read-only transaction that BEGIN began (a
        /// snapshot, a read checking a standby's freshness). Neither sets the quotas nor the write bucket.
        case plain, onAStandbyFollowedServer, readOnly, readOnlyBegun
        static let plainChecking = DeviceTransaction.context + ", " + DeviceTransaction.keptIDCheck("$9")
        static let onAStandbyFollowedServerChecking = DeviceTransaction.contextOnAStandbyFollowedServer + ", "
            + DeviceTransaction.keptIDCheck("$9")
        /// A read's: the role, the device, the statement and lock limits ($1…$3), and the transaction refuses writes
        /// (25006) also when no BEGIN READ ONLY began it. Setting it on is allowed at any point of a transaction (only
        /// off must come first).
        static let readOnlyText = """
            SELECT set_config('role', \(ServiceRoles.serviceRoleSQL), true), set_config('app.device_id', $1, true), \
            set_config('statement_timeout', $2, true), set_config('lock_timeout', $3, true), \
            set_config('transaction_read_only', 'on', true)
            """
        static let readOnlyChecking = readOnlyText + ", " + DeviceTransaction.keptIDCheck("$4")
        /// A begun read-only transaction's: the same limits and the idle one ($4), which BEGIN READ ONLY already made
        /// read-only.
        static let readOnlyBegunText = """
            SELECT set_config('role', \(ServiceRoles.serviceRoleSQL), true), set_config('app.device_id', $1, true), \
            set_config('statement_timeout', $2, true), set_config('lock_timeout', $3, true), \
            set_config('idle_in_transaction_session_timeout', $4, true)
            """
        static let readOnlyBegunChecking = readOnlyBegunText + ", " + DeviceTransaction.keptIDCheck("$5")

        func text(checkingKeptID: Bool) -> String {
            switch (self, checkingKeptID) {
            case (.plain, false): DeviceTransaction.context
            case (.plain, true): Self.plainChecking
            case (.onAStandbyFollowedServer, false): DeviceTransaction.contextOnAStandbyFollowedServer
            case (.onAStandbyFollowedServer, true): Self.onAStandbyFollowedServerChecking
            case (.readOnly, false): Self.readOnlyText
            case (.readOnly, true): Self.readOnlyChecking
            case (.readOnlyBegun, false): Self.readOnlyBegunText
            case (.readOnlyBegun, true): Self.readOnlyBegunChecking
            }
        }
    }

    /// The context statement a request transaction sends first with the default settings (`ContextSettings.default`),
    /// for `make bench`'s pgbench scripts, which must send what `serve` sends: its text, with the device's key as
    /// `$1`, then `values` as `$2`, `$3`…, and with `checkingKeptID` the kept id as the parameter after them.
    /// `readOnly`: a read of one round trip (no BEGIN); else a transaction that may write, on a server whose
    /// synchronous standby is not required.
    public static func contextStatement(readOnly: Bool, checkingKeptID: Bool) -> (text: String, values: [String]) {
        let settings = ContextSettings.default
        let sql: ContextSQL = readOnly ? .readOnly : .plain
        let values = switch sql {
        case .readOnly: [settings.statement, settings.lock]
        default: [settings.statement, settings.lock, settings.idleInTransaction, settings.maxLogs, settings.maxTombstones,
                  settings.writeBurst, settings.writeRate]
        }
        return (sql.text(checkingKeptID: checkingKeptID), values)
    }

    /// True once the transaction has begun on the server.
    var hasBegun: Bool { prefix == nil }

    /// Runs a statement inside the transaction.
    /// - Throws: the statement's `PostgresError`; `TransactionError` (phase `begin`) if the context could not be set.
    @discardableResult
    public func query(_ query: PostgresQuery) throws -> QueryResult {
        try run(query, commit: false)
    }

    /// Runs a statement and returns the rows it affected.
    /// - Throws: as `query(_:)`.
    @discardableResult
    public func execute(_ query: PostgresQuery) throws -> Int {
        try run(query, commit: false).rowsAffected
    }

    /// Runs the last statement and commits in the same round trip. Nothing may follow it.
    /// - Throws: the statement's `PostgresError`; `TransactionError` (phase `begin` or `commit`).
    @discardableResult
    public func finalQuery(_ query: PostgresQuery) throws -> QueryResult {
        try run(query, commit: true)
    }

    /// Runs `body` in a savepoint, so that a failure inside it (a unique violation) leaves the transaction usable.
    /// - Throws: the body's error, after rolling back to the savepoint.
    @discardableResult
    public func savepoint<T>(_ body: (DeviceTransaction) throws -> T) throws -> T {
        try begin()
        return try connection.savepoint { _ in try body(self) }
    }

    /// Sends the prefix on its own (for work that starts with a savepoint or a script).
    func begin() throws {
        var prefix: [PostgresQuery] = []
        guard let count = takePrefix(into: &prefix) else { return }
        try check(connection.pipelineResults(prefix), prefixCount: count, commitIndex: nil)
    }

    func commit() throws {
        commitSent = true
        isFinished = true
        do {
            guard let recorder else {
                try connection.executeScript("COMMIT")
                return
            }
            // Committed once this returns: a position that cannot be read only costs the token, as in `run`.
            let result = try connection.executeScript("COMMIT; SELECT pg_current_wal_insert_lsn()::text")
            try? record(result, in: recorder)
        } catch {
            throw TransactionError(phase: .commit, underlying: error)
        }
    }

    /// The position the COMMIT reached (the WAL insert position just after it: at or past its commit record).
    private static let commitPosition: PostgresQuery = "SELECT pg_current_wal_insert_lsn()::text"

    private func record(_ result: QueryResult, in recorder: CommitRecorder) throws {
        guard let text = try result.first?.decode(0, as: String.self), let token = ConsistencyToken(lsn: text) else { return }
        recorder.record(token)
    }

    /// `finalQuery`, with the device's stored id looked up after `query` in the same round trip (and kept), when it is
    /// not known yet: for registration, whose statement may have made the device.
    func finalQueryThenStoredID(_ query: PostgresQuery) throws -> QueryResult {
        try run(query, commit: true, lookUp: resolvedID == nil)
    }

    private func run(_ query: PostgresQuery, commit: Bool, lookUp: Bool = false) throws -> QueryResult {
        guard !isFinished else {
            throw PostgresClientError(.misuse, "a statement after finalQuery(_:): the transaction is already committed")
        }
        var batch: [PostgresQuery] = []
        batch.reserveCapacity(4 + (prefix?.count ?? 0))
        // A request of one round trip: its pipeline is its transaction (`readsWithoutBegin`, `writesWithoutBegin`).
        let implicit = commit && (readsWithoutBegin || writesWithoutBegin) && prefix != nil
        // A kept id's check goes in the context when the transaction begins here; on a begun one, on its own.
        var prefixCount = takePrefix(into: &batch, withoutBegin: implicit) ?? 0
        if let check = pendingCheck {
            batch.append(PostgresQuery(unsafeSQL: Self.checkKeptID, binds: [check]))
            prefixCount += 1
            pendingCheck = nil
        }
        batch.append(query)
        if lookUp { batch.append(Self.lookUpID) }
        let records = commit ? recorder : nil
        if commit {
            if !implicit { batch.append(Self.commitStatement) }
            commitSent = true
            isFinished = true
            // After the COMMIT, in the same round trip: where it reached, for the response's Consistency-Token.
            if records != nil { batch.append(Self.commitPosition) }
        }
        let results: [Result<QueryResult, any Error>]
        do {
            results = try connection.pipelineResults(batch)
        } catch let error as TransactionError where error.phase == .commit && readOnly {
            // A read's implicit transaction failed to end: it had committed nothing, so its error is not a commit's
            // (whose outcome may be unknown) but the read's own.
            throw error.underlying
        }
        let commitIndex = commit && !implicit ? prefixCount + 1 + (lookUp ? 1 : 0) : nil
        try check(results, prefixCount: prefixCount, commitIndex: commitIndex)
        if let records, case .success(let position)? = results.last { try? record(position, in: records) }
        if lookUp, case .success(let answer) = results[prefixCount + 1] {
            let found = try answer.first?.decode(0, as: UUID?.self) ?? nil
            resolvedID = .some(found)
            if let found { keptIDs?.keep(found, for: device.key) }
        }
        return try results[prefixCount].get()
    }

    /// Attributes a failure to its phase: the context prefix is `begin`, a failing COMMIT is `commit`, and the
    /// work's own statement is rethrown as is.
    private func check(_ results: [Result<QueryResult, any Error>], prefixCount: Int, commitIndex: Int?) throws {
        for (index, result) in results.enumerated() {
            guard case .failure(let error) = result else { continue }
            if (error as? PostgresClientError)?.kind == .skipped { continue }
            if index < prefixCount { throw TransactionError(phase: .begin, underlying: error) }
            if index == commitIndex { throw TransactionError(phase: .commit, underlying: error) }
            // The position query after a successful COMMIT: the write is done; its token is only missing.
            if let commitIndex, index > commitIndex { continue }
            throw error
        }
        if checksFreshness, prefixCount >= 3 {
            checksFreshness = false
            if case .success(let answer) = results[2], try answer.first?.decode(0, as: Bool.self) == false {
                throw StaleStandby()
            }
        }
    }
}

/// A standby had not replayed as far as the request's `Consistency-Token`: the read is run on the primary.
struct StaleStandby: Error {
}
