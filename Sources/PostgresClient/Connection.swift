internal import CLibPQ
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

/// One PostgreSQL connection through libpq.
///
/// Not thread-safe, by design: a `PGconn` is used by one thread at a time. Its calls block, so use it on a
/// thread of its own (the `ConnectionPool` runs each borrower on the connection's dedicated thread), never on
/// Swift's cooperative pool.
public final class Connection {
    private let handle: ConnectionHandle
    public let configuration: ConnectionConfiguration
    private var preparedStatements: [String: String] = [:]
    var savepointDepth = 0
    /// Network round trips made so far (one per pipeline Sync or simple query): what tests and benchmarks count.
    public private(set) var roundTrips = 0
    private var traceFile: UnsafeMutablePointer<FILE>?
    /// Set when a protocol exchange was cut short; the connection is then never used again.
    private var isBroken = false

    private var pointer: OpaquePointer { handle.pointer }

    deinit { stopTracing() }

    /// Opens a connection.
    /// - Throws: `PostgresClientError.connectionFailed` with libpq's reason, scrubbed of the password.
    public init(configuration: ConnectionConfiguration) throws {
        self.configuration = configuration
        var keywords: [String?] = ["connect_timeout", "fallback_application_name"]
        var values: [String?] = [String(configuration.connectTimeoutSeconds), configuration.applicationName]
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
        let expand: Int32 = configuration.connectionString == nil ? 0 : 1
        // Both arrays end with NULL, as libpq expects.
        let raw = withCStringArray(keywords + [nil]) { keywordPointers in
            withCStringArray(values + [nil]) { valuePointers in
                PQconnectdbParams(keywordPointers, valuePointers, expand)
            }
        }
        guard let raw else { throw PostgresClientError(.connectionFailed, "libpq could not allocate a connection") }
        handle = ConnectionHandle(raw)
        guard PQstatus(raw) == CONNECTION_OK else {
            throw PostgresClientError(.connectionFailed, "cannot connect to PostgreSQL: \(lastErrorMessage)")
        }
        PQsetNoticeReceiver(raw, noticeReceiver, nil)
    }

    /// True while the connection is believed healthy (libpq learns of a broken socket only when it uses it).
    public var isOpen: Bool { !isBroken && PQstatus(pointer) == CONNECTION_OK }

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
    /// `PostgresClientError` "skipped". Throws only when nothing could be sent or the connection broke.
    public func pipelineResults(_ queries: [PostgresQuery]) throws -> [Result<QueryResult, any Error>] {
        for query in queries {
            if let error = query.bindError { throw error }
            if query.sql.utf8.contains(0) {
                throw PostgresClientError(.invalidParameter, "the SQL text contains a NUL byte")
            }
        }
        guard isOpen else { throw PostgresClientError(.connectionLost, "the connection is closed") }
        guard PQenterPipelineMode(pointer) == 1 else { throw connectionError() }

        // Send. A statement the cache has not seen is prepared in the same batch.
        var expectsPrepare = [Bool](repeating: false, count: queries.count)
        var newlyPrepared: [String: String] = [:]
        for (index, query) in queries.enumerated() {
            let sent: Int32 = withCStringArray(query.binds) { values in
                let count = Int32(query.binds.count)
                guard configuration.statementCache else {
                    return PQsendQueryParams(pointer, query.sql, count, nil, values, nil, nil, 0)
                }
                var name = preparedStatements[query.sql] ?? newlyPrepared[query.sql]
                if name == nil {
                    let fresh = "pp_\(preparedStatements.count + newlyPrepared.count + 1)"
                    guard PQsendPrepare(pointer, fresh, query.sql, count, nil) == 1 else { return 0 }
                    newlyPrepared[query.sql] = fresh
                    expectsPrepare[index] = true
                    name = fresh
                }
                return PQsendQueryPrepared(pointer, name, count, values, nil, nil, 0)
            }
            guard sent == 1 else { throw abandonPipeline() }
        }
        guard PQpipelineSync(pointer) == 1 else { throw abandonPipeline() }
        roundTrips += 1

        // Read: each statement's results end with a NULL; the batch ends with PIPELINE_SYNC.
        var results: [Result<QueryResult, any Error>] = []
        var failedPrepares: Set<String> = []
        for (index, query) in queries.enumerated() {
            var failure: (any Error)?
            if expectsPrepare[index], let error = error(of: try readStatementResult()) {
                failedPrepares.insert(query.sql)
                failure = error
            }
            let result = try readStatementResult()
            if let failure = failure ?? error(of: result) {
                results.append(.failure(failure))
            } else {
                results.append(.success(result))
            }
        }
        guard let sync = PQgetResult(pointer) else { throw abandonPipeline() }
        let syncStatus = PQresultStatus(sync)
        PQclear(sync)
        guard syncStatus == PGRES_PIPELINE_SYNC, PQexitPipelineMode(pointer) == 1 else { throw abandonPipeline() }

        for (sql, name) in newlyPrepared where !failedPrepares.contains(sql) { preparedStatements[sql] = name }
        for case .failure(let error) in results { forgetStaleStatements(after: error, queries: queries) }
        return results
    }

    /// Runs SQL without parameters through the simple query protocol: several statements may be sent at once,
    /// and any statement is allowed (`CREATE INDEX CONCURRENTLY`, `VACUUM`). Returns the last result.
    /// - Throws: `PostgresError` from the server, `PostgresClientError` for a NUL byte or a lost connection.
    @discardableResult
    public func executeScript(_ sql: String) throws -> QueryResult {
        guard !sql.utf8.contains(0) else {
            throw PostgresClientError(.invalidParameter, "the SQL text contains a NUL byte")
        }
        guard isOpen else { throw PostgresClientError(.connectionLost, "the connection is closed") }
        roundTrips += 1
        guard let raw = PQexec(pointer, sql) else { throw connectionError() }
        let result = QueryResult(taking: raw)
        if let error = error(of: result) { throw error }
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
        if PQresultStatus(raw) == PGRES_FATAL_ERROR, !isOpen { throw abandonPipeline() }
        return result
    }

    private func error(of result: QueryResult) -> (any Error)? {
        switch result.status {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY: return nil
        case PGRES_PIPELINE_ABORTED:
            return PostgresClientError(.skipped, "statement skipped after an earlier failure in the pipeline")
        case PGRES_FATAL_ERROR, PGRES_NONFATAL_ERROR, PGRES_BAD_RESPONSE:
            return result.serverError ?? connectionError()
        default:
            return PostgresClientError(.unsupported, "unsupported result (COPY is not supported)")
        }
    }

    /// A dropped prepared statement (DISCARD ALL, a pooler) or a changed table makes the cached plan fail;
    /// forget it so that the next call prepares it again.
    private func forgetStaleStatements(after error: any Error, queries: [PostgresQuery]) {
        guard let serverError = error as? PostgresError,
              serverError.sqlState == .invalidSQLStatementName || serverError.sqlState == .featureNotSupported
        else { return }
        for query in queries { preparedStatements[query.sql] = nil }
    }

    /// The connection is no longer in a known protocol state: mark it broken so the pool replaces it.
    private func abandonPipeline() -> PostgresClientError {
        let error = connectionError()
        isBroken = true
        return PostgresClientError(.connectionLost, error.message)
    }

    private var lastErrorMessage: String {
        let raw = String(cString: PQerrorMessage(pointer)).trimmingCharacters(in: .whitespacesAndNewlines)
        return ConnectionStringSecrets.scrub(raw.replacingOccurrences(of: "\n", with: " "),
                                             secrets: configuration.secrets)
    }

    private func connectionError() -> PostgresClientError {
        PostgresClientError(isOpen ? .unsupported : .connectionLost,
                            lastErrorMessage.isEmpty ? "connection to the server was lost" : lastErrorMessage)
    }
}

/// Calls `body` with NUL-terminated copies of `strings` (NULL for `nil`), freed afterwards.
func withCStringArray<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let copies = strings.map { $0.flatMap { strdup($0) } }
    defer { copies.forEach { free($0) } }
    return body(copies.map { $0.map { UnsafePointer($0) } })
}
