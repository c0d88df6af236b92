import Foundation
import Hummingbird
import Metrics
import PoopyPalsData
import PostgresClient
import Prometheus

/// The routes the app calls. Handlers never filter by device themselves: the device id becomes
/// `app.device_id` of the request transaction and row-level security does the rest.
struct APIRoutes: Sendable {
    let database: Database
    /// A pool of one for `/readyz`, so that readiness does not queue behind a busy request pool.
    let probe: ConnectionPool?
    let tokens: TokenVerifier
    let metrics: PrometheusCollectorRegistry
    // Made once: a repository resolves its metrics when it is created, which is no work for every request.
    let users: UserRepository
    let devices: DeviceRepository
    let logs: PoopLogRepository

    init(database: Database, probe: ConnectionPool? = nil, tokens: TokenVerifier, metrics: PrometheusCollectorRegistry) {
        self.database = database
        self.probe = probe
        self.tokens = tokens
        self.metrics = metrics
        users = UserRepository(database: database)
        devices = DeviceRepository(database: database)
        logs = PoopLogRepository(database: database)
    }

    func register(on router: Router<APIContext>) {
        router.put("/v1/device", use: putDevice)
        router.get("/v1/device", use: getDevice)
        router.post("/v1/logs", use: createLog)
        router.get("/v1/logs", use: listLogs)
        router.get("/v1/logs/{id}", use: getLog)
        router.patch("/v1/logs/{id}", use: patchLog)
        router.delete("/v1/logs/{id}", use: deleteLog)
        router.put("/v1/profile", use: putProfile)
        router.get("/v1/profile", use: getProfile)
        router.get("/healthz", use: health)
        router.get("/readyz", use: ready)
        router.get("/openapi.yaml", use: openAPI)
        SyncRoutes(sync: SyncRepository(database: database)).register(on: router)
        DataRightsRoutes(devices: devices, export: DeviceExport(database: database)).register(on: router)
    }

    // MARK: Device

    @Sendable func putDevice(_ request: Request, context: APIContext) async throws -> Response {
        // The nil UUID is no device's id: as a new registration it is the weakest id there is.
        if request.headers[.deviceID].flatMap(UUIDText.parse) == DeviceID.nilUUID { throw APIError.weakDeviceID }
        let device = try DeviceID(validating: request.headers[.deviceID])
        let body = try await JSONBody.read(request, context: context,
                                           allowed: ["model", "osVersion", "appVersion", "buildNumber", "isSimulator"],
                                           serverOwned: ["id", "userId", "createdAt", "lastSeenAt"])
        let info = DeviceInfo(model: try body.string("model"), osVersion: try body.string("osVersion"),
                              appVersion: try body.string("appVersion"), buildNumber: try body.string("buildNumber"),
                              isSimulator: try body.bool("isSimulator") ?? false)
        let registration = try await devices.register(info, as: device)
        return try JSONResponse.make(registration.created ? .created : .ok, DeviceBody(registration.device))
    }

    /// The `Consistency-Token` a read sent back (a write's answer), so that it is served no older than that write.
    /// - Throws: `InvalidField` (400) for a value this service did not make.
    static func consistency(_ request: Request) throws -> ConsistencyToken? {
        guard let value = request.headers[.consistencyToken] else { return nil }
        return try ConsistencyToken(encoded: value)
    }

    @Sendable func getDevice(_ request: Request, context: APIContext) async throws -> Response {
        let device = try DeviceID(validating: request.headers[.deviceID])
        guard let row = try await devices.current(as: device, consistency: try Self.consistency(request)) else { throw APIError(.notFound, "not_found", "this device is not registered") }
        return try JSONResponse.make(.ok, DeviceBody(row))
    }

    // MARK: Logs

    @Sendable func createLog(_ request: Request, context: APIContext) async throws -> Response {
        let device = try DeviceID(validating: request.headers[.deviceID])
        let body = try await JSONBody.read(request, context: context, allowed: ["id", "occurredAt", "bristolType", "notes"],
                                           serverOwned: ["deviceId", "createdAt", "updatedAt"])
        let new = NewPoopLog(id: try body.uuid("id"), occurredAt: try body.required("occurredAt", body.timestamp),
                             bristolType: try body.required("bristolType", body.int), notes: try body.string("notes"))
        let (log, created) = try await logs.create(new, as: device)
        return try JSONResponse.make(created ? .created : .ok, writing: LogBody(log))
    }

    @Sendable func listLogs(_ request: Request, context: APIContext) async throws -> Response {
        let device = try DeviceID(validating: request.headers[.deviceID])
        let query = request.uri.queryParameters
        var limit = 50
        if let text = query.get("limit") {
            guard let value = Int(text) else { throw APIError.invalid("limit", "must be an integer") }
            limit = value
        }
        let page = try await logs.list(before: query.get("before"), limit: limit, as: device, consistency: try Self.consistency(request))
        return try JSONResponse.make(.ok, writing: LogPageBody(items: page.items.map(LogBody.init), nextCursor: page.nextCursor))
    }

    @Sendable func getLog(_ request: Request, context: APIContext) async throws -> Response {
        let device = try DeviceID(validating: request.headers[.deviceID])
        guard let log = try await logs.get(try Self.logID(context), as: device, consistency: try Self.consistency(request)) else {
            throw APIError.notFound
        }
        return try JSONResponse.make(.ok, writing: LogBody(log))
    }

    @Sendable func patchLog(_ request: Request, context: APIContext) async throws -> Response {
        let device = try DeviceID(validating: request.headers[.deviceID])
        let id = try Self.logID(context)
        let body = try await JSONBody.read(request, context: context, allowed: ["occurredAt", "bristolType", "notes"],
                                           serverOwned: ["id", "deviceId", "createdAt", "updatedAt"])
        try body.refuseNull("occurredAt")
        try body.refuseNull("bristolType")
        var patch = PoopLogPatch(occurredAt: try body.timestamp("occurredAt"), bristolType: try body.int("bristolType"))
        if body.isNull("notes") { patch.notes = .clear } else if let notes = try body.string("notes") { patch.notes = notes.isEmpty ? .clear : .set(notes) }
        guard let log = try await logs.update(id, patch, as: device) else { throw APIError.notFound }
        return try JSONResponse.make(.ok, writing: LogBody(log))
    }

    @Sendable func deleteLog(_ request: Request, context: APIContext) async throws -> Response {
        let device = try DeviceID(validating: request.headers[.deviceID])
        guard try await logs.delete(try Self.logID(context), as: device) else { throw APIError.notFound }
        return Response(status: .noContent)
    }

    static func logID(_ context: APIContext) throws -> UUID {
        guard let text = context.parameters.get("id"), let id = UUIDText.parse(text) else { throw APIError.invalid("id", "must be a UUID") }
        return id
    }

    // MARK: Profile

    /// Creates or updates the profile of the token's subject and links this device to it, in one transaction.
    /// `fullName` / `dateOfBirth` absent from the body stay as they are; `null` clears them. An email that
    /// belongs to another account is a 409 that reveals nothing about it.
    @Sendable func putProfile(_ request: Request, context: APIContext) async throws -> Response {
        let device = try DeviceID(validating: request.headers[.deviceID])
        let identity = try await tokens.verify(authorization: request.headers[.authorization])
        let body = try await JSONBody.read(request, context: context, allowed: ["fullName", "dateOfBirth"],
                                           serverOwned: ["id", "email", "role", "createdAt", "updatedAt", "userId"])
        let fullName = try body.update("fullName", body.string)
        let dateOfBirth = try body.update("dateOfBirth", body.date)
        let (profile, linked) = try await users.ensureProfileAndLink(as: device, id: identity.userID, email: identity.email,
                                                                     fullName: fullName, dateOfBirth: dateOfBirth)
        return try JSONResponse.make(.ok, ProfileBody(user: UserBody(profile.user), device: DeviceBody(linked)))
    }

    @Sendable func getProfile(_ request: Request, context: APIContext) async throws -> Response {
        let device = try DeviceID(validating: request.headers[.deviceID])
        let identity = try await tokens.verify(authorization: request.headers[.authorization])
        guard let user = try await users.find(id: identity.userID, as: device) else {
            throw APIError(.notFound, "not_found", "no profile for this token on this device yet; create it with PUT /v1/profile")
        }
        return try JSONResponse.make(.ok, ProfileBody(user: UserBody(user), device: try await devices.current(as: device).map(DeviceBody.init)))
    }

    // MARK: Operations

    /// The OpenAPI document this service implements, as openapi.yaml holds it (embedded at build time).
    @Sendable func openAPI(_ request: Request, context: APIContext) async throws -> Response {
        Response(status: .ok, headers: [.contentType: "application/yaml; charset=utf-8"],
                 body: ResponseBody(byteBuffer: ByteBuffer(string: OpenAPIDocument.yaml + "\n")))
    }

    /// Liveness: the process answers. No database: a slow or busy database must not get the process restarted.
    @Sendable func health(_ request: Request, context: APIContext) async throws -> Response {
        try JSONResponse.make(.ok, ["status": "ok"])
    }

    /// Readiness: one round trip that does what every request does first (begin, switch to the service role,
    /// commit) and asks whether the node takes writes, on the probe's own connection, bounded by a 2 s statement
    /// timeout and a 3 s deadline the client enforces (a hung node cannot hold the probe). A read-only node (a
    /// standby, or a primary demoted by a switchover, reached through a pooler or a connection made before) is
    /// not ready: the connection is dropped, and the next probe connects afresh, to the writable host if any.
    @Sendable func ready(_ request: Request, context: APIContext) async throws -> Response {
        let pool = probe ?? database.pool
        do {
            let writable = try await pool.withConnection(limits: .within(.seconds(3))) { connection -> Bool in
                let results = try connection.pipeline([
                    "BEGIN",
                    """
                    SELECT set_config('statement_timeout', '2000', true), set_config('role', \(Database.serviceRole), true), \
                    current_setting('transaction_read_only') = 'off' AS writable
                    """,
                    "COMMIT",
                ])
                let writable = try results[1][0].decode("writable", as: Bool.self)
                if !writable { connection.discardAfterUse() }
                return writable
            }
            guard writable else {
                context.logger.warning("not ready: the database takes no writes", metadata: ["request_id": "\(context.requestID)"])
                var unavailable = APIError.databaseUnavailable
                unavailable.message = "the database reached is read-only (a standby, or a primary being switched over); try again shortly"
                throw unavailable
            }
        } catch let error as PostgresClientError where error.kind == .poolTimeout {
            throw APIError.busy
        } catch let error as APIError {
            throw error
        } catch {
            context.logger.warning("not ready", metadata: ["request_id": "\(context.requestID)", "error": "\(error)"])
            // The cause's class, never its text (which names hosts and users): a refused login will not heal by
            // waiting, an unreachable server may.
            var unavailable = APIError.databaseUnavailable
            switch PostgresClientError.find(in: error)?.connectionFailure {
            case .authenticationFailed?:
                unavailable.message = "the database refused the service's login (authentication failed): its credentials need fixing"
            case .unreachable?:
                unavailable.message = "the database is not reachable (down, or a wrong host or port); try again shortly"
            case nil:
                break
            }
            throw unavailable
        }
        return try JSONResponse.make(.ok, ["status": "ok"])
    }

    @Sendable func prometheus(_ request: Request, context: APIContext) async throws -> Response {
        let pool = database.pool.statistics
        for (name, help, value) in [("poopypals_db_pool_in_use", "Database connections lent to a request now.", pool.inUse),
                                    ("poopypals_db_pool_waiting", "Requests waiting for a database connection now.", pool.waiting),
                                    ("poopypals_db_pool_open", "Database connections open now.", pool.open)] {
            metrics.makeGauge(descriptor: RequestMetrics.descriptor(name, help: help)).set(Double(value))
        }
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: MetricsExposition.render(metrics))))
    }
}
