internal import CLibPQ
internal import CLibPQExit
import Foundation
import Logging

/// Owns one `PGconn`: `PQfinish` runs in `deinit`, also after a failed connect.
private final class ConnectionHandle {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { PQfinish(pointer) }
}

/// Server notices (`relation … already exists, skipping`) go to the debug log instead of stderr.
private let noticeLogger = Logger(label: "poopypals.postgres")
private let noticeReceiver: PQnoticeReceiver = { _, result in
    guard let result, let message = PQresultErrorField(result, CLIBPQ_DIAG_MESSAGE_PRIMARY) else { return }
    noticeLogger.debug("server notice", metadata: ["notice": "\(String(cString: message))"])
}

extension Connection {
    /// Whether this process's TLS library was told at its start to keep its state at exit, so that a thread still in
    /// libpq while the process exits does not crash it (Sources/CLibPQExit/exit.c). False only where libpq has no
    /// OpenSSL to tell.
    public static var tlsLibraryStaysAtExit: Bool { clibpqexit_openssl_stays_at_exit() == 1 }
}

/// One PostgreSQL connection through libpq.
///
/// Not thread-safe, by design: a `PGconn` is used by one thread at a time. Its calls block, so use it on a
/// thread of its own (the `ConnectionPool` runs each borrower on the connection's dedicated thread), never on
/// Swift's cooperative pool.
public final class Connection {
    private let handle: ConnectionHandle
    public let configuration: ConnectionConfiguration
    private var statements: StatementCache
    var savepointDepth = 0
    /// Cancels this connection's running statement from any thread (`PQcancel`).
    public let cancelToken: CancelToken
    /// When the connection was opened, for the pool's maximum lifetime.
    public let openedAt = ContinuousClock.now
    /// True once a statement may have left session state (a `SET`, an advisory lock, a temporary table) that the
    /// next borrower would inherit; `resetSession()` clears it.
    public private(set) var sessionMayBeDirty = false
    /// Network round trips made so far (one per pipeline Sync or simple query): what tests and benchmarks count.
    public private(set) var roundTrips = 0
    private var traceFile: UnsafeMutablePointer<FILE>?
    /// Set when a protocol exchange was cut short; the connection is then never used again.
    private var isBroken = false
    /// Set when the server said this node cannot serve (read-only, shutting down): closed once its borrower is done.
    public private(set) var shouldDiscard = false
    /// Round trips as other threads see them, for abandoning one that outlives its deadline.
    public let watch: RoundTripWatch

    private var pointer: OpaquePointer { handle.pointer }

    deinit { stopTracing() }

    /// Opens a connection.
    /// - Throws: `PostgresClientError.connectionFailed` with libpq's reason, scrubbed of the password.
    public init(configuration: ConnectionConfiguration) throws {
        self.configuration = configuration
        statements = StatementCache(capacity: configuration.statementCacheCapacity)
        // Defaults the connection string may override: TCP keepalives and a user timeout, so a peer that vanished
        // is noticed in seconds rather than hours; and the session settings decoding relies on.
        var keywords: [String?] = ["connect_timeout", "fallback_application_name", "keepalives", "keepalives_idle",
                                   "keepalives_interval", "keepalives_count", "tcp_user_timeout", "options"]
        var values: [String?] = [String(configuration.connectTimeoutSeconds), configuration.applicationName, "1", "30",
                                 "10", "3", String(configuration.tcpUserTimeoutMilliseconds), configuration.startupOptions]
        // No GSSAPI encryption unless the URL or PGGSSENCMODE asks for it: libpq's default (prefer) asks Kerberos for
        // credentials on every connect, and Kerberos's library tears its locks down when the process exits, so a
        // thread connecting then aborted the process (an assertion in k5_mutex_lock; ProcessExitTests).
        if getenv("PGGSSENCMODE") == nil {
            keywords.append("gssencmode")
            values.append("disable")
        }
        // Array entries before the expanded dbname can be overridden by the connection string; entries after
        // it override the string. So our defaults go first, the explicit database override last.
        if let connectionString = configuration.connectionString {
            keywords.append("dbname")
            values.append(connectionString)
        }
        if let database = configuration.database {
            keywords.append("dbname")
            values.append(database)
        }
        // After the string: decoding is written for UTF-8 whatever the URL says.
        keywords.append("client_encoding")
        values.append("UTF8")
        let expand: Int32 = configuration.connectionString == nil ? 0 : 1
        var search = WritableHostSearch(connectionString: configuration.connectionString)
        var hostOverride: (host: String, port: String)?
        var raw: OpaquePointer?
        while true {
            var attemptKeywords = keywords
            var attemptValues = values
            if search.checksWritability {
                // The check below replaces libpq's, which believes what a pooler reports: a PgBouncer goes on
                // saying "read-only" (or "read-write") after its node was promoted (or demoted), so libpq's check
                // refused the new primary's PgBouncer for as long as it was asked.
                attemptKeywords.append("target_session_attrs")
                attemptValues.append("any")
            }
            if let hostOverride {  // after the string: these hosts, in this order, replace the URL's
                attemptKeywords += ["host", "port"]
                attemptValues += [hostOverride.host, hostOverride.port]
            }
            // Both arrays end with NULL, as libpq expects.
            raw = withCStringArray(attemptKeywords + [nil]) { keywordPointers in
                withCStringArray(attemptValues + [nil]) { valuePointers in
                    PQconnectdbParams(keywordPointers, valuePointers, expand)
                }
            }
            guard let connected = raw, PQstatus(connected) == CONNECTION_OK, search.checksWritability else { break }
            let standby = WritableHostSearch.isStandby(connected,
                timeout: search.checkTimeout(default: configuration.connectTimeoutSeconds))
            if standby == false { break }
            // A standby passed for writable (a pooler's stale report), or a host that could not say what it is (a
            // PgBouncer refusing every server login for server_login_retry after its node went away, a node
            // shutting down): try the URL's next host, if any. Ending the search there instead kept every
            // retry on the first host for the pooler's 15 s while the second host's node was the new primary.
            search.noteCheck(standby: standby)
            guard let next = search.dropHost(of: connected) else {
                PQfinish(connected)
                throw PostgresClientError(.connectionFailed, "cannot connect to PostgreSQL: \(search.noWritableHost)",
                                          connectionFailure: .unreachable)
            }
            PQfinish(connected)
            hostOverride = next
        }
        guard let raw else { throw PostgresClientError(.connectionFailed, "libpq could not allocate a connection") }
        handle = ConnectionHandle(raw)
        cancelToken = CancelToken(PQgetCancel(raw))
        watch = RoundTripWatch(socket: PQsocket(raw))
        guard PQstatus(raw) == CONNECTION_OK else {
            let refusedLogin = PQconnectionNeedsPassword(raw) != 0 || PQconnectionUsedPassword(raw) != 0
            var message = "cannot connect to PostgreSQL: \(lastErrorMessage)"
            if message.contains("unsupported startup parameter: options") {
                // PgBouncer refuses the startup options unless told to ignore them; what they pin is then set
                // per session (DateStyle, TimeZone: kept by PgBouncer) and per transaction (the timeouts).
                message += " (behind PgBouncer, set ignore_startup_parameters = extra_float_digits,options)"
            }
            throw PostgresClientError(.connectionFailed, message,
                                      connectionFailure: refusedLogin ? .authenticationFailed : .unreachable)
        }
        PQsetNoticeReceiver(raw, noticeReceiver, nil)
        try pinSessionParameters()
    }

    /// The settings decoding depends on, as the server reports them (`ParameterStatus`). They are asked for at
    /// startup (`options`); a pooler that drops startup options, or a connection string that replaces them,
    /// gets them set here instead, which costs one round trip at connect only.
    private func pinSessionParameters() throws {
        func current(_ name: String) -> String { PQparameterStatus(pointer, name).map { String(cString: $0) } ?? "" }
        var fixes: [String] = []
        if !current("DateStyle").hasPrefix("ISO") { fixes.append("SET DateStyle = 'ISO, MDY'") }
        if current("TimeZone") != "UTC" { fixes.append("SET TimeZone = 'UTC'") }
        if current("client_encoding") != "UTF8" { fixes.append("SET client_encoding = 'UTF8'") }
        guard !fixes.isEmpty else { return }
        do {
            try runScript(fixes.joined(separator: "; "))
        } catch {
            throw PostgresClientError(.connectionFailed, "cannot pin the session settings: \(error)")
        }
    }

    /// Clears what a borrower may have left in the session, keeping prepared statements: open cursors, `LISTEN`,
    /// session advisory locks, temporary tables, and every setting back to its connection default. One round trip.
    /// - Throws: `PostgresError` or `PostgresClientError`; the pool then discards the connection.
    public func resetSession() throws {
        try runScript("CLOSE ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); DISCARD TEMP; RESET ALL")
        try pinSessionParameters()
        sessionMayBeDirty = false
    }

    /// Closes prepared statements the cache has let go of (evicted, or of unknown state after an error).
    /// Runs only when idle, so the request path never pays for it. Failures are ignored: the name is unique and
    /// the worst case is a statement that stays prepared until the connection closes.
    public func closeReleasedStatements() {
        guard transactionState == .idle, isOpen else { return }
        if statements.needsDeallocateAll {
            _ = try? runScript("DEALLOCATE ALL")
        } else {
            for name in statements.namesToClose { _ = try? runScript("DEALLOCATE \(name)") }
        }
        statements.closed()
    }

    /// The extensions installed in the connected database (`pg_extension`), asked at the first call (one round
    /// trip) and kept for the connection's life: a caller that adapts what it sends to the database (the Citus
    /// context) asks once per connection, not per request. An extension created later is seen by connections
    /// opened after it.
    public func installedExtensions() throws -> Set<String> {
        if let extensions { return extensions }
        let names = try Set(query("SELECT extname::text FROM pg_catalog.pg_extension").map { try $0.decode(0, as: String.self) })
        extensions = names
        return names
    }

    private var extensions: Set<String>?

    /// Statements in the cache (for tests).
    var cachedStatementCount: Int { statements.count }

    /// True while the connection is believed healthy (libpq learns of a broken socket only when it uses it).
    public var isOpen: Bool { !isBroken && !watch.isAbandoned && PQstatus(pointer) == CONNECTION_OK }

    /// Closes the connection once its borrower is done instead of lending it again (for example when the node it
    /// reaches turned out to be read-only).
    public func discardAfterUse() { shouldDiscard = true }

    /// The server process serving this connection (`pg_backend_pid()`).
    public var serverProcessID: Int32 { PQbackendPID(pointer) }

    /// The server's transaction state for this connection.
    public var transactionState: TransactionState {
        switch PQtransactionStatus(pointer) {
        case PQTRANS_IDLE: return .idle
        case PQTRANS_INTRANS: return .inTransaction
        case PQTRANS_INERROR: return .failed
        case PQTRANS_ACTIVE: return .active
        default: return .unknown
        }
    }

    public enum TransactionState: Sendable { case idle, inTransaction, failed, active, unknown }

    /// Runs one statement: one network round trip, also the first time (Parse is pipelined with Execute).
    /// - Throws: `PostgresError` from the server, `PostgresClientError` for bad parameters or a lost connection.
    @discardableResult
    public func query(_ query: PostgresQuery) throws -> QueryResult {
        try pipeline([query])[0]
    }

    /// Runs one statement and returns the number of rows it affected.
    /// - Throws: as `query(_:)`.
    @discardableResult
    public func execute(_ query: PostgresQuery) throws -> Int {
        try pipeline([query])[0].rowsAffected
    }

    /// Sends every statement, then one Sync, then reads every result: one network round trip in all.
    ///
    /// Statements run in order as one implicit transaction unless the batch has its own `BEGIN`/`COMMIT`.
    /// If one fails, the server skips the rest until the Sync, and this throws the first failure.
    /// Meant for a handful of small statements (libpq's blocking mode could stall on a huge batch).
    /// - Throws: `PostgresError`, or `PostgresClientError` before anything is sent for an invalid parameter.
    public func pipeline(_ queries: [PostgresQuery]) throws -> [QueryResult] {
        try pipelineResults(queries).map { try $0.get() }
    }

    /// Like `pipeline(_:)`, but reports each statement's outcome: statements after a failure come back as
    /// `PostgresClientError` "skipped". Throws when nothing could be sent or the connection broke, and
    /// `TransactionError` (phase `commit`) when every statement succeeded and the implicit transaction they made
    /// failed to commit at the Sync (a deferred constraint; the server's error, its SQLSTATE kept): nothing of the
    /// batch took effect, and the connection is left idle.
    ///
    /// A cached statement that went stale under the service (an online `ALTER COLUMN … TYPE` makes the server
    /// answer 0A000 "cached plan must not change result type"; `DEALLOCATE ALL` or a pooler makes it 26000) is
    /// forgotten and, when the batch was a transaction of its own, the batch is sent again at once: nothing in
    /// it took effect, since a failed statement rolls its whole batch back. Inside a longer transaction the
    /// failure is reported as `PostgresClientError.statementInvalidated`, for the caller to retry the transaction.
    public func pipelineResults(_ queries: [PostgresQuery]) throws -> [Result<QueryResult, any Error>] {
        for query in queries {
            if let error = query.bindError { throw error }
            if query.sql.containsNULByte {
                throw PostgresClientError(.invalidParameter, "the SQL text contains a NUL byte")
            }
        }
        guard isOpen else { throw PostgresClientError(.connectionLost, "the connection is closed") }
        let selfContained = transactionState == .idle
        var retries = 0
        while true {
            let (results, stale) = try sendPipeline(queries)
            guard let stale else { return results }
            let committedBefore = queries[..<stale].contains { Self.endsTransaction($0.sql) }
            guard selfContained, !committedBefore, retries < queries.count else {
                return results.map { result in
                    guard case .failure(let error as PostgresError) = result else { return result }
                    return .failure(PostgresClientError(.statementInvalidated,
                        "a prepared statement was invalidated by a schema change or a session reset (\(error.sqlState)); the transaction was rolled back and can be retried"))
                }
            }
            if transactionState != .idle { try runScript("ROLLBACK") }
            retries += 1
        }
    }

    /// Sends the batch and reads it. Returns the index of the statement that failed because its cached
    /// prepared statement was stale, if that is how the batch failed.
    private func sendPipeline(_ queries: [PostgresQuery]) throws -> ([Result<QueryResult, any Error>], stale: Int?) {
        guard PQenterPipelineMode(pointer) == 1 else { throw connectionError() }
        watch.started()
        defer { watch.finished() }

        // Send. A statement the cache has not seen is prepared in the same batch.
        var fresh = [(name: String, persists: Bool)?](repeating: nil, count: queries.count)
        var names = [String?](repeating: nil, count: queries.count)
        for (index, query) in queries.enumerated() {
            let sent: Int32 = withCStringArray(query.binds) { values in
                guard let count = Int32(exactly: query.binds.count) else { return 0 }
                guard configuration.statementCache, !query.oneOff else {
                    if SessionState.mayPersist(query.sql) { sessionMayBeDirty = true }
                    return PQsendQueryParams(pointer, query.sql, count, nil, values, nil, nil, query.binaryResults ? 1 : 0)
                }
                // The session-state check runs once per SQL text: cached statements carry its answer.
                let cached = statements.lookup(query.sql)
                let persists = cached?.persists ?? SessionState.mayPersist(query.sql)
                if persists { sessionMayBeDirty = true }
                var name = cached?.name ?? queries[..<index].firstIndex { $0.sql == query.sql }.flatMap { names[$0] }
                if name == nil {
                    let newName = statements.freshName()
                    guard PQsendPrepare(pointer, newName, query.sql, count, nil) == 1 else { return 0 }
                    fresh[index] = (newName, persists)
                    name = newName
                }
                names[index] = name
                return PQsendQueryPrepared(pointer, name, count, values, nil, nil, query.binaryResults ? 1 : 0)
            }
            guard sent == 1 else { throw abandonPipeline() }
        }
        guard PQpipelineSync(pointer) == 1 else { throw abandonPipeline() }
        roundTrips += 1

        // Read: each statement's results end with a NULL; the batch ends with PIPELINE_SYNC.
        var results: [Result<QueryResult, any Error>] = []
        results.reserveCapacity(queries.count)
        var prepared: [(sql: String, name: String, persists: Bool)] = []
        for (index, query) in queries.enumerated() {
            var failure: (any Error)?
            if let (name, persists) = fresh[index] {
                if let error = error(of: try readStatementResult()) {
                    failure = error
                } else {
                    prepared.append((query.sql, name, persists))
                }
            }
            let result = try readStatementResult()
            if let failure = failure ?? error(of: result) {
                results.append(.failure(failure))
            } else {
                results.append(.success(result))
            }
        }
        guard var sync = PQgetResult(pointer) else { throw abandonPipeline(goodbye: Self.goodbye(in: results)) }
        // An error after every statement's results and before the Sync's, every statement having succeeded: the commit
        // of the implicit transaction the batch was (a batch with no BEGIN ends its transaction at the Sync) failed.
        // libpq hands it over as a result of its own, then a NULL, then the Sync's. (After a failed statement, an error
        // there is the connection's end: said below, with the server's goodbye among the statements' results.)
        // Only the first failure is the server's verdict; the rest were skipped because of it.
        let failed = results.firstIndex(where: { if case .failure = $0 { true } else { false } })
        var failedAtSync: PostgresError?
        if PQresultStatus(sync) == PGRES_FATAL_ERROR, failed == nil {
            let failure = QueryResult(taking: sync).serverError
            guard isOpen, let failure else { throw abandonPipeline(goodbye: failure) }
            if failure.sqlState.meansTheNodeIsUnfit { shouldDiscard = true }
            failedAtSync = failure
            while let extra = PQgetResult(pointer) { PQclear(extra) }
            guard let next = PQgetResult(pointer) else { throw abandonPipeline(goodbye: failure) }
            sync = next
        }
        let syncStatus = PQresultStatus(sync)
        PQclear(sync)
        guard syncStatus == PGRES_PIPELINE_SYNC, PQexitPipelineMode(pointer) == 1 else {
            throw abandonPipeline(goodbye: failedAtSync ?? Self.goodbye(in: results))
        }

        // (A statement prepared in a batch that failed to commit stays prepared: PREPARE is not transactional.)
        for (sql, name, persists) in prepared { statements.insert(sql, name: name, persists: persists) }
        if let failedAtSync { throw TransactionError(phase: .commit, underlying: failedAtSync) }
        guard let failed, case .failure(let error as PostgresError) = results[failed] else { return (results, nil) }
        let fromCache = fresh[failed] == nil && configuration.statementCache && !queries[failed].oneOff
        switch error.sqlState {
        case .featureNotSupported where fromCache:
            // "cached plan must not change result type": this statement only.
            statements.evict(queries[failed].sql)
            return (results, failed)
        case .invalidSQLStatementName where fromCache, .duplicatePreparedStatement:
            // The server's statements are not what we think: forget them all, close them all when idle.
            statements.reset()
            return (results, failed)
        default:
            return (results, nil)
        }
    }

    private static func endsTransaction(_ sql: String) -> Bool {
        let head = sql.prefix(12).lowercased()
        return head.hasPrefix("commit") || head.hasPrefix("end") || head.hasPrefix("rollback") || head.hasPrefix("abort")
    }

    /// Runs SQL without parameters through the simple query protocol: several statements may be sent at once,
    /// and any statement is allowed (`CREATE INDEX CONCURRENTLY`, `VACUUM`). Returns the last result.
    /// - Throws: `PostgresError` from the server, `PostgresClientError` for a NUL byte or a lost connection.
    @discardableResult
    public func executeScript(_ sql: String) throws -> QueryResult {
        if SessionState.mayPersist(sql) { sessionMayBeDirty = true }
        return try runScript(sql)
    }

    @discardableResult
    private func runScript(_ sql: String) throws -> QueryResult {
        guard !sql.containsNULByte else {
            throw PostgresClientError(.invalidParameter, "the SQL text contains a NUL byte")
        }
        guard isOpen else { throw PostgresClientError(.connectionLost, "the connection is closed") }
        roundTrips += 1
        watch.started()
        let raw = PQexec(pointer, sql)
        watch.finished()
        guard let raw else { throw connectionError() }
        let result = QueryResult(taking: raw)
        if let error = error(of: result) {
            if !isOpen { isBroken = true }
            throw error
        }
        return result
    }

    /// Starts libpq's protocol trace of this connection into `path` (every message sent `F` and received `B`,
    /// one per line), until `stopTracing()`. For measuring round trips from the wire, not from our own code.
    /// - Throws: `PostgresClientError` when the file cannot be opened.
    public func startTracing(to path: String) throws {
        guard traceFile == nil, let file = fopen(path, "w") else {
            throw PostgresClientError(.unsupported, "cannot open the trace file")
        }
        traceFile = file
        PQtrace(pointer, file)
        PQsetTraceFlags(pointer, PQTRACE_SUPPRESS_TIMESTAMPS)
    }

    public func stopTracing() {
        guard let file = traceFile else { return }
        PQuntrace(pointer)
        fclose(file)
        traceFile = nil
    }

    /// True when the connection can be handed to a new borrower: open, outside any transaction, and with no
    /// news from the server on the socket. A terminated backend or a restarted server leaves its goodbye
    /// (and EOF) there, which this reads without sending anything.
    func isUsableForCheckout() -> Bool {
        guard isOpen, transactionState == .idle else { return false }
        for _ in 0..<4 {
            var descriptor = pollfd(fd: PQsocket(pointer), events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 0)
            if ready == 0 { return isOpen }
            if ready < 0 || PQconsumeInput(pointer) == 0 || !isOpen { return false }
            while PQisBusy(pointer) == 0, let stray = PQgetResult(pointer) { PQclear(stray) }
        }
        return isOpen
    }

    // MARK: - Reading results

    private func readStatementResult() throws -> QueryResult {
        guard let raw = PQgetResult(pointer) else { throw abandonPipeline() }
        let result = QueryResult(taking: raw)
        // The NULL that ends this statement's results.
        while let extra = PQgetResult(pointer) {
            PQclear(extra)
        }
        if PQresultStatus(raw) == PGRES_FATAL_ERROR, !isOpen { throw abandonPipeline(goodbye: result.serverError) }
        return result
    }

    private func error(of result: QueryResult) -> (any Error)? {
        switch result.status {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY: return nil
        case PGRES_PIPELINE_ABORTED:
            return PostgresClientError(.skipped, "statement skipped after an earlier failure in the pipeline")
        case PGRES_FATAL_ERROR, PGRES_NONFATAL_ERROR, PGRES_BAD_RESPONSE:
            guard let error = result.serverError else { return connectionError() }
            if error.sqlState.meansTheNodeIsUnfit { shouldDiscard = true }
            return error
        default:
            return PostgresClientError(.unsupported, "unsupported result (COPY is not supported)")
        }
    }

    /// The connection is no longer in a known protocol state: mark it broken so the pool replaces it.
    /// `goodbye`: the server's error that ended the session, when one came before the connection closed (an
    /// administrator's termination, the idle-in-transaction timeout, a shutdown): said before libpq's "server closed
    /// the connection unexpectedly", which says nothing of why (all CI's log had of a COMMIT lost once, stop 60).
    private func abandonPipeline(goodbye: PostgresError? = nil) -> PostgresClientError {
        let error = connectionError()
        isBroken = true
        guard error.kind != .deadlineExceeded else { return error }
        guard let goodbye, goodbye.endedTheSession else { return PostgresClientError(.connectionLost, error.message) }
        return PostgresClientError(.connectionLost, "\(goodbye); \(error.message)")
    }

    /// The first statement's failure in `results` that is the server's goodbye: read only once the batch has failed.
    private static func goodbye(in results: [Result<QueryResult, any Error>]) -> PostgresError? {
        for case .failure(let error as PostgresError) in results where error.endedTheSession { return error }
        return nil
    }

    private var lastErrorMessage: String {
        let raw = String(cString: PQerrorMessage(pointer)).trimmingCharacters(in: .whitespacesAndNewlines)
        return ConnectionStringSecrets.scrub(raw.replacingOccurrences(of: "\n", with: " "),
                                             secrets: configuration.secrets)
    }

    private func connectionError() -> PostgresClientError {
        if watch.isAbandoned {
            isBroken = true
            return PostgresClientError(.deadlineExceeded,
                "the database did not answer within the request's deadline; the round trip was abandoned")
        }
        return PostgresClientError(isOpen ? .unsupported : .connectionLost,
                                   lastErrorMessage.isEmpty ? "connection to the server was lost" : lastErrorMessage)
    }
}

/// Calls `body` with NUL-terminated copies of `strings` (NULL for `nil`), freed afterwards.
/// One allocation holds the pointers and every copy: a `strdup` per value and two arrays per statement were
/// more than a tenth of the client's runtime instructions for a request of eleven parameters.
func withCStringArray<R>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
    var textBytes = 0
    for case let string? in strings { textBytes += string.utf8.count + 1 }
    let pointerBytes = strings.count * MemoryLayout<UnsafePointer<CChar>?>.stride
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: Swift.max(1, pointerBytes + textBytes),
                                                  alignment: MemoryLayout<UnsafePointer<CChar>?>.alignment)
    defer { buffer.deallocate() }
    let pointers = buffer.bindMemory(to: UnsafePointer<CChar>?.self, capacity: strings.count)
    let text = (buffer + pointerBytes).bindMemory(to: CChar.self, capacity: textBytes)
    var offset = 0
    for (index, string) in strings.enumerated() {
        guard let string else {
            pointers[index] = nil
            continue
        }
        let start = text + offset
        // The UTF-8 copied where it lies (a native string's is contiguous), then the terminating NUL.
        let copied = string.utf8.withContiguousStorageIfAvailable { utf8 -> Int in
            if let source = utf8.baseAddress { memcpy(start, source, utf8.count) }
            return utf8.count
        } ?? UnsafeMutableRawBufferPointer(start: start, count: string.utf8.count)
            .initializeMemory(as: UInt8.self, from: string.utf8).initialized.count
        start[copied] = 0
        pointers[index] = UnsafePointer(start)
        offset += copied + 1
    }
    return body(UnsafePointer(pointers))
}

/// Asks the server to cancel whatever its connection is running, from any thread (libpq's `PQcancel` is made
/// for that). The request travels on a connection of its own, so it is a blocking network call: callers run it
/// off the request's path.
public final class CancelToken: @unchecked Sendable {
    private let lock = NSLock()
    private var handle: OpaquePointer?

    init(_ handle: OpaquePointer?) { self.handle = handle }

    deinit { PQfreeCancel(handle) }

    /// - Returns: true when the request was delivered (the statement may still have finished first).
    @discardableResult
    public func cancel() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard let handle else { return false }
        var buffer = [CChar](repeating: 0, count: 256)
        return PQcancel(handle, &buffer, Int32(buffer.count)) == 1
    }
}

extension PostgresError {
    /// FATAL or PANIC: the server ends the session after sending it.
    var endedTheSession: Bool { severity == "FATAL" || severity == "PANIC" }
}
