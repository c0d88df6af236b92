import Logging
import Metrics
import PostgresClient
import Synchronization

/// The data layer's way into PostgreSQL: every unit of work is one transaction, either as a device
/// (`asDevice`, row-level security decides what it sees) or, explicitly, as the system (`asSystem`).
public final class Database: Sendable {
    public let pool: ConnectionPool
    /// Where read-only device work goes when set (`POOPYPALS_READ_DATABASE_URL`: standbys); writes never do.
    public let readPool: ConnectionPool?
    public let retryPolicy: RetryPolicy
    public let timeouts: RequestTimeouts
    /// `timeouts`, `quotas` and `rates` as the transaction's context statement sets them.
    let contextSettings: ContextSettings
    private let logger = Logger(label: "poopypals.db")
    private let retries = Counter(label: "poopypals_db_retries_total")
    private let readsOnPrimary = Counter(label: "poopypals_db_reads_on_primary_total")

    /// At most this many requests of one device hold a connection at once (the rest wait without one).
    public let deviceSlots: DeviceSlots
    /// The stored id of each key served lately (`DeviceTransaction.storedID()`).
    let keptIDs = KeptDeviceIDs()
    /// Set once a connection of either pool is found on a Citus node. From then on the read pool is not used and
    /// no write records a position (`Consistency-Token`): a write's position is per worker there, and a
    /// coordinator's WAL says nothing of a worker standby's (docs/scaling.md).
    private let distributed = Flag()

    /// What one device may store (sql/0014), set in every device transaction.
    public let quotas: DeviceQuotas
    /// How fast a device may write and a network register devices (sql/0015).
    public let rates: RateLimits

    public init(pool: ConnectionPool, readPool: ConnectionPool? = nil, retryPolicy: RetryPolicy = .default,
                timeouts: RequestTimeouts = .default, deviceSlots: DeviceSlots = DeviceSlots(),
                quotas: DeviceQuotas = .default, rates: RateLimits = .default, requiresSynchronousStandby: Bool = false) {
        self.deviceSlots = deviceSlots
        self.quotas = quotas
        self.rates = rates
        self.pool = pool
        self.readPool = readPool
        self.retryPolicy = retryPolicy
        self.timeouts = timeouts
        contextSettings = ContextSettings(timeouts, quotas: quotas, rates: rates, requiresSynchronousStandby: requiresSynchronousStandby)
    }

    /// Runs `work` as the device whose raw id is given, in one transaction.
    /// - Throws: `AuthenticationError` before anything is sent when the id is missing or malformed; otherwise
    ///   as `asDevice(_:idempotent:_:)` with a validated id.
    @discardableResult
    public func asDevice<T: Sendable>(
        _ rawDeviceID: String?, idempotent: Bool = false,
        _ work: @escaping @Sendable (DeviceTransaction) throws -> T
    ) async throws -> T {
        try await asDevice(DeviceID(validating: rawDeviceID), idempotent: idempotent, work)
    }

    /// Runs `work` as `device`: BEGIN, switch to the service role and set `app.device_id` (both
    /// transaction-local, so nothing outlives the transaction on a pooled connection or behind PgBouncer),
    /// the work, COMMIT. A work of one statement ending in `finalQuery` costs one round trip.
    ///
    /// With `idempotent: true`, serialization failures, deadlocks and connections lost before COMMIT are
    /// retried with backoff (see `RetryPolicy`); never otherwise. Any work is run once more, at once, when a
    /// cached statement went stale under it (an online schema change): the server rolled it back whole.
    /// Each statement is bounded by `timeouts` (SQLSTATE 57014 or 55P03 when exceeded).
    /// - Throws: the work's error (after rollback); `TransactionError` naming the phase for begin/commit;
    ///   `PostgresClientError` when no connection could be had.
    ///
    /// With `snapshot: true` the transaction is REPEATABLE READ READ ONLY: every statement sees one state. With
    /// `readOnly: true` it is READ ONLY: a lost answer to its COMMIT is then a plain failure, never `OutcomeUnknown`.
    /// At most `deviceSlots.perDevice` of one device's transactions run at once; the others wait for a slot, holding
    /// no connection, and throw `DeviceBusy` after `deviceSlots.wait`.
    @discardableResult
    public func asDevice<T: Sendable>(
        _ device: DeviceID, idempotent: Bool = false, snapshot: Bool = false, readOnly: Bool = false,
        consistency: ConsistencyToken? = nil,
        _ work: @escaping @Sendable (DeviceTransaction) throws -> T
    ) async throws -> T {
        try await deviceSlots.withSlot(device.key) {
            try await onAPool(device, idempotent: idempotent, snapshot: snapshot, readOnly: readOnly,
                              consistency: consistency, work)
        }
    }

    private func onAPool<T: Sendable>(
        _ device: DeviceID, idempotent: Bool, snapshot: Bool, readOnly: Bool, consistency: ConsistencyToken?,
        _ work: @escaping @Sendable (DeviceTransaction) throws -> T
    ) async throws -> T {
        // Read-only work goes to the read pool when there is one: there with the freshness check when the client
        // sent a token; on the primary when the standby is behind it, or cannot be reached.
        if readOnly || snapshot, let readPool, !distributed.isSet {
            do {
                return try await run(on: readPool, viaReadPool: true, device, idempotent: idempotent, snapshot: snapshot,
                                     readOnly: true, freshAt: consistency, recorder: nil, work)
            } catch is ReadsNotOnReplicas {
                // Counted as nothing: from now on no read tries the read pool.
            } catch let error where Self.goesToThePrimary(error) {
                readsOnPrimary.increment()
            }
        }
        return try await run(on: pool, device, idempotent: idempotent, snapshot: snapshot, readOnly: readOnly, freshAt: nil,
                             recorder: readPool == nil || readOnly || snapshot ? nil : RequestTrace.commits, work)
    }

    /// A read the read pool could not serve: its standby is behind the client's token, or unreachable.
    private static func goesToThePrimary(_ error: any Error) -> Bool {
        if error is StaleStandby { return true }
        switch PostgresClientError.find(in: error)?.kind {
        case .connectionFailed?, .connectionLost?, .deadlineExceeded?, .poolTimeout?: return true
        default: return PostgresError.find(in: error)?.sqlState.meansTheNodeIsUnfit ?? false
        }
    }

    private func run<T: Sendable>(
        on pool: ConnectionPool, viaReadPool: Bool = false, _ device: DeviceID, idempotent: Bool, snapshot: Bool, readOnly: Bool,
        freshAt: ConsistencyToken?, recorder: CommitRecorder?, _ work: @escaping @Sendable (DeviceTransaction) throws -> T
    ) async throws -> T {
        let timeouts = timeouts
        let keptIDs = keptIDs
        let settings = contextSettings
        let quotas = quotas
        let rates = rates
        // One deadline for the request, retries included; an export (a snapshot of many round trips, which may
        // wait for a slow reader between them) bounds each round trip instead.
        let limits = snapshot ? RoundTripLimits(perRoundTrip: timeouts.deadline.nanoseconds) : .within(timeouts.deadline)
        // Set when an attempt found its kept id stale: the attempts after it look the id up, whatever is kept by then
        // (another request of this instance may have kept the stale id again meanwhile, from a lookup of before).
        let foundStale = Flag()
        let distributed = distributed
        let hasReadPool = readPool != nil
        let logger = logger
        return try await withRetries(idempotent: idempotent, limits: limits) {
            try await pool.withConnection(limits: limits) { connection in
                let carried: Bool
                do {
                    carried = try Self.carriesContext(on: connection)
                } catch {
                    // Nothing of the transaction was sent: a lost or hung connection here is what it would be in the
                    // transaction's first round trip (its own error, not a server's verdict on the context).
                    throw AttemptFailure(error: error, commitSent: false)
                }
                // Said once: only the first connection to set the flag warns (two found at once no longer both did).
                if carried && !distributed.isSet && distributed.set() {
                    if hasReadPool {
                        logger.warning("""
                            the database is a Citus coordinator: POOPYPALS_READ_DATABASE_URL is not used, and writes carry no \
                            Consistency-Token (a write's position is per worker; docs/scaling.md)
                            """)
                    }
                }
                // Nothing was sent: the read runs on the primary (`onAPool`).
                if carried && viaReadPool { throw AttemptFailure(error: ReadsNotOnReplicas(), commitSent: false) }
                let transaction = DeviceTransaction(connection: connection, device: device, settings: settings,
                                                    snapshot: snapshot, readOnly: readOnly, freshAt: freshAt,
                                                    recorder: carried ? nil : recorder,
                                                    carried: carried, keptIDs: keptIDs, trustsKept: !foundStale.isSet)
                do {
                    let value = try work(transaction)
                    try Self.finish(transaction)
                    return value
                } catch {
                    Self.rollBack(connection)
                    // A stale kept id stopped the request (its context's check before the work ran, or the log trigger when
                    // the key moved while the work ran: sql/0040; rolled back either way): looked up again next attempt.
                    if Self.isStaleKeptID(error) {
                        keptIDs.forget(device.key)
                        foundStale.set()
                    }
                    if let exceeded = quotas.exceeded(by: error) { throw exceeded }
                    if let limited = rates.exceeded(by: error) { throw limited }
                    // A read-only transaction commits nothing: its outcome is never unknown.
                    throw AttemptFailure(error: error, commitSent: transaction.commitSent && !transaction.readOnly)
                }
            }
        }
    }

    /// Whether the device context must be carried to Citus workers (`DeviceTransaction`'s `carried`): the database
    /// has the `citus` extension. Asked once per connection, at its first device transaction (one round trip
    /// before it), and kept with the connection (`Connection.installedExtensions`).
    private static func carriesContext(on connection: Connection) throws -> Bool {
        try connection.installedExtensions().contains("citus")
    }

    /// Runs `work` in a transaction as the connecting role, with no device: for migrations, monitoring and
    /// maintenance. Row-level security is forced on device tables, so they look empty from here.
    /// - Throws: the work's error (after rollback); `TransactionError` naming the phase.
    @discardableResult
    public func asSystem<T: Sendable>(
        idempotent: Bool = false, _ work: @escaping @Sendable (Connection) throws -> T
    ) async throws -> T {
        try await withRetries(idempotent: idempotent, limits: nil) {
            try await self.pool.withConnection { connection in
                do {
                    return try connection.transaction { try work($0) }
                } catch let error as TransactionError where error.phase == .commit {
                    throw AttemptFailure(error: error, commitSent: true)
                }
            }
        }
    }

    /// Commits unless the work already did (`finalQuery`) or never sent anything (then nothing began).
    private static func finish(_ transaction: DeviceTransaction) throws {
        let connection = transaction.connection
        if connection.transactionState == .failed {
            throw TransactionError(phase: .commit, underlying: PostgresClientError(.unsupported,
                "a statement failed inside the request and its error was caught; the work was rolled back"))
        }
        if transaction.hasBegun && !transaction.isFinished { try transaction.commit() }
    }

    private static func rollBack(_ connection: Connection) {
        guard connection.isOpen, connection.transactionState != .idle else { return }
        // If even ROLLBACK fails, the pool sees the connection is not idle and discards it.
        _ = try? connection.executeScript("ROLLBACK")
    }

    /// Runs `attempt` until it succeeds, its failure is final, or retrying is not allowed: only `idempotent` work
    /// is tried again, at most `retryPolicy.maxAttempts` times, and never past the deadline of `limits`.
    /// A failure after COMMIT was sent is resolved by replaying idempotent work (it recognises its own earlier
    /// commit: a create by its id, an upsert by its content); when that is not possible it is `OutcomeUnknown`.
    private func withRetries<T: Sendable>(
        idempotent: Bool, limits: RoundTripLimits?, _ attempt: @Sendable () async throws -> T
    ) async throws -> T {
        var number = 1
        var staleRetried = false
        var keptIDRetried = false
        /// Set once an attempt's COMMIT went unanswered: from then on only a successful replay settles it. A
        /// replay that fails (it waited for the first attempt's locks, which a commit stuck on its standby still
        /// holds) leaves the outcome as unknown as it was.
        var unsettled: (any Error)?
        while true {
            do {
                return try await attempt()
            } catch {
                let failure = error as? AttemptFailure
                let underlying = failure?.error ?? error
                if !staleRetried, Self.isStaleStatement(underlying) {
                    // The connection has already forgotten the stale statement; nothing of the work took effect.
                    staleRetried = true
                    retries.increment()
                    continue
                }
                if !keptIDRetried, Self.isStaleKeptID(underlying) {
                    // Refused in the context before the work ran, or by the log trigger (sql/0040); nothing took effect,
                    // and the id is forgotten.
                    keptIDRetried = true
                    retries.increment()
                    continue
                }
                let verdict = retryPolicy.verdict(underlying, commitSent: failure?.commitSent ?? false)
                let delay = retryPolicy.delay(afterAttempt: number)
                // Room for the pause and a short attempt (100 ms) before the deadline.
                let roomLeft = limits?.deadline.map { RoundTripWatch.now() &+ delay.nanoseconds &+ 100_000_000 < $0 } ?? true
                let mayRetry = idempotent && number < retryPolicy.maxAttempts && roomLeft
                if verdict == .outcomeUnknown { unsettled = underlying }
                if let unsettled, verdict == .final || !mayRetry {
                    logger.warning("outcome unknown: COMMIT was sent and not answered", metadata: [
                        "request_id": "\(RequestTrace.id ?? "-")", "attempt": "\(number)",
                    ])
                    throw OutcomeUnknown(cause: unsettled)
                }
                // Past here, an unknown outcome is being replayed.
                if verdict == .final || !mayRetry { throw underlying }
                logger.warning("retrying idempotent work", metadata: [
                    "request_id": "\(RequestTrace.id ?? "-")", "attempt": "\(number)", "delay_ms": "\(delay.milliseconds)",
                    "reason": "\(PostgresError.find(in: underlying)?.sqlState.rawValue ?? PostgresClientError.find(in: underlying)?.kind.rawValue ?? "connection")",
                    "after_commit": "\(verdict == .outcomeUnknown)",
                ])
                retries.increment()
                number += 1
                try await Task.sleep(for: delay)
            }
        }
    }
}

extension Database {
    static func isStaleStatement(_ error: any Error) -> Bool {
        PostgresClientError.find(in: error)?.kind == .statementInvalidated
    }

    /// sql/0030's `poopypals_device_is`: the key no longer stands for the device id this instance kept.
    static func isStaleKeptID(_ error: any Error) -> Bool {
        error is StaleKeptID || PostgresError.find(in: error)?.sqlState.rawValue == "PPD01"
    }
}

/// An insert named its device by a kept id that no statement had checked, and was refused as another device's row
/// (42501: the key stands for another device now, `DeviceTransaction.storedID(checkedBy: .theInsert)`): the id is stale.
/// `Database` looks it up again and runs the work once more, as for PPD01.
struct StaleKeptID: Error {}

/// Carries whether COMMIT had been sent when an attempt failed, out of the connection's thread.
private struct AttemptFailure: Error {
    let error: any Error
    let commitSent: Bool
}

/// A read-pool connection on a Citus node: the read goes to the primary (`Database.distributed`).
private struct ReadsNotOnReplicas: Error {}

/// Set once, read often: whether an attempt of one request found its kept device id stale (`Database.run`), whether
/// the database is distributed.
private final class Flag: Sendable {
    private let value = Mutex(false)
    var isSet: Bool { value.withLock { $0 } }
    /// Sets the flag; true for the one call that found it unset.
    @discardableResult
    func set() -> Bool { value.withLock { was in defer { was = true }; return !was } }
}
