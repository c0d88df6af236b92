import PostgresClient

/// Finishes the erasures `DeviceRepository.erase` began (sql/0021): a batch of one device's logs per transaction,
/// the oldest erasure first, skipping one another instance is working on, so that any number of instances (and
/// `poopypals maintenance`) share the work without waiting for each other.
public struct PendingErasures: Sendable {
    public struct Progress: Sendable, Equatable {
        /// Devices whose erasure is still under way.
        public var devicesErasing: Int64
        /// Logs deleted.
        public var logsErased: Int64
        /// Transactions run.
        public var batches: Int

        public init(devicesErasing: Int64 = 0, logsErased: Int64 = 0, batches: Int = 0) {
            (self.devicesErasing, self.logsErased, self.batches) = (devicesErasing, logsErased, batches)
        }
    }

    let database: Database
    let batch: Int

    public init(database: Database, batch: Int = DeviceRepository.erasureBatch) {
        self.database = database
        self.batch = max(1, batch)
    }

    /// One batch, as the service role, in a transaction of its own.
    /// - Throws: `PostgresError`; `TransactionError`.
    public func step() async throws -> Progress {
        let batch = batch
        return try await database.asSystem(idempotent: true) { conn in try Self.batch(of: batch, in: conn) }
    }

    /// One batch on `connection` (its own transaction), for the tools: `poopypals maintenance`.
    /// - Throws: `PostgresError`; `TransactionError`.
    public static func step(on connection: Connection, batch: Int = DeviceRepository.erasureBatch) throws -> Progress {
        try connection.transaction { conn in try Self.batch(of: max(1, batch), in: conn) }
    }

    private static func batch(of size: Int, in conn: Connection) throws -> Progress {
        try conn.query("SELECT set_config('role', \(unescaped: ServiceRoles.serviceRoleSQL), true), set_config('statement_timeout', '60s', true)")
        let row = try conn.query("SELECT erasing, logs FROM poopypals_erase_pending(\(size))")[0]
        return Progress(devicesErasing: try row.decode("erasing"), logsErased: try row.decode("logs"), batches: 1)
    }

    /// Batches until no erasure is left, `maxBatches` have run, or `deadline` has passed, whichever comes first,
    /// pausing `pause` between batches (the pool serves requests meanwhile).
    /// - Throws: as `step()`; `CancellationError`.
    public func run(maxBatches: Int, until deadline: ContinuousClock.Instant, pause: Duration = .zero) async throws -> Progress {
        var total = Progress(devicesErasing: 0, logsErased: 0, batches: 0)
        while total.batches < maxBatches, ContinuousClock.now < deadline {
            let progress = try await step()
            total.devicesErasing = progress.devicesErasing
            total.logsErased += progress.logsErased
            total.batches += 1
            if progress.devicesErasing == 0 { break }
            if pause > .zero { try await Task.sleep(for: pause) }
        }
        return total
    }
}
