import Hummingbird
import NIOCore
import PoopyPalsData
import PostgresClient
import Prometheus

/// What operators and orchestrators call: liveness, readiness, the OpenAPI document, and `/metrics` (on the
/// metrics listener, registered apart by `buildApplication`).
struct OperationsController: Sendable {
    let database: Database
    /// A pool of one for `/readyz`, so that readiness does not queue behind a busy request pool.
    let probe: ConnectionPool?
    let metrics: PrometheusCollectorRegistry
    /// This release against the database's schema: `/readyz` asks it afresh.
    var schema: SchemaGate? = nil

    func register(on router: Router<APIContext>) {
        router.get("/healthz", use: health)
        router.get("/readyz", use: ready)
        router.get("/openapi.yaml", use: openAPI)
    }

    /// The OpenAPI document this service implements, as openapi.yaml holds it (embedded at build time).
    @Sendable func openAPI(_ request: Request, context: APIContext) async throws -> Response {
        Response(status: .ok, headers: [.contentType: "application/yaml; charset=utf-8"],
                 body: ResponseBody(byteBuffer: ByteBuffer(string: OpenAPIDocument.yaml + "\n")))
    }

    /// Liveness: the process answers. No database: a slow or busy database must not get the process restarted.
    @Sendable func health(_ request: Request, context: APIContext) async throws -> Response {
        try JSONResponse.make(.ok, writing: StatusBody.ok)
    }

    /// Readiness (`Database.checkReadiness`): the node reached takes writes, within 3 s, and the request pool can
    /// serve (not every connection held while requests give up waiting for one: 503 `busy`).
    @Sendable func ready(_ request: Request, context: APIContext) async throws -> Response {
        if database.pool.isStarved() {
            context.logger.warning("not ready: every database connection is held and requests time out waiting", metadata: [
                "request_id": "\(context.requestID)",
            ])
            var busy = APIError.busy
            busy.message = "every database connection is in use and requests time out waiting for one; try again shortly"
            throw busy
        }
        do {
            try await database.checkReadiness(on: probe)
        } catch {
            // The cause's class, never its text (which names hosts and users): a refused login will not heal by
            // waiting, an unreachable server may.
            var unavailable = APIError.databaseUnavailable
            switch error {
            case .busy:
                throw APIError.busy
            case .unavailable(.readOnly):
                context.logger.warning("not ready: the database takes no writes", metadata: ["request_id": "\(context.requestID)"])
                unavailable.message = "the database reached is read-only (a standby, or a primary being switched over); try again shortly"
            case .unavailable(.authenticationFailed):
                context.logger.warning("not ready", metadata: ["request_id": "\(context.requestID)", "error": "\(error)"])
                unavailable.message = "the database refused the service's login (authentication failed): its credentials need fixing"
            case .unavailable(.unreachable):
                context.logger.warning("not ready", metadata: ["request_id": "\(context.requestID)", "error": "\(error)"])
                unavailable.message = "the database is not reachable (down, or a wrong host or port); try again shortly"
            default:
                context.logger.warning("not ready", metadata: ["request_id": "\(context.requestID)", "error": "\(error)"])
            }
            throw unavailable
        }
        // A release that cannot serve this schema is not ready: taken out by the load balancer, it is replaced. When
        // it cannot be asked now (within 1 s), the last answer stands, as it does for requests.
        if let schema {
            let verdict = await schema.check(within: .seconds(1))
            if let verdict, let refusal = SchemaGate.refusal(verdict) {
                context.logger.warning("not ready: \(verdict.explanation)", metadata: ["request_id": "\(context.requestID)"])
                throw refusal
            }
            if verdict == nil, let refusal = schema.refusal() { throw refusal }
        }
        return try JSONResponse.make(.ok, writing: StatusBody.ok)
    }

    @Sendable func prometheus(_ request: Request, context: APIContext) async throws -> Response {
        // This scrape's readings go into this answer only, never into the process's registry: two scrapes at once
        // (two Prometheus servers) each set the registry's gauges and rendered it, so one answer could carry half
        // of each reading.
        var readings: [MetricsExposition.Gauge] = []
        func gauge(_ name: String, _ help: String, _ value: Double) {
            readings.append(.init(name: name, help: help, value: value))
        }
        let pool = database.pool.statistics
        gauge("poopypals_db_pool_in_use", "Database connections lent to a request now.", Double(pool.inUse))
        gauge("poopypals_db_pool_waiting", "Requests waiting for a database connection now.", Double(pool.waiting))
        gauge("poopypals_db_pool_open", "Database connections open now.", Double(pool.open))
        // Continuous archiving (issue 43), read at each scrape from the primary's pg_stat_archiver: an operator is
        // paged before a failing or stalled archive makes a mistake impossible to undo. Up 0 when it could not be read.
        let archive = await database.archiveStatus(on: probe)
        gauge("poopypals_archive_check_up", "1 when the last scrape could read pg_stat_archiver of the primary, else 0.", archive == nil ? 0 : 1)
        // Unread figures are NaN, never the last scrape's values passed off as current.
        gauge("poopypals_archive_enabled", "1 when archive_mode is on (or always) on the primary.",
              archive.map { $0.archiveMode == "off" ? 0 : 1 } ?? .nan)
        gauge("poopypals_archive_failing", "1 when the primary's last archive attempt failed.", archive.map { $0.failing ? 1 : 0 } ?? .nan)
        gauge("poopypals_archive_failures", "Failed archive attempts since the primary's statistics were reset (pg_stat_archiver).",
              archive.map { Double($0.failedCount) } ?? .nan)
        gauge("poopypals_archive_segments_waiting", "Finished WAL segments not yet archived (-1: unknown).",
              archive.map { Double($0.segmentsWaiting ?? -1) } ?? .nan)
        gauge("poopypals_archive_last_archived_age_seconds", "Seconds since the primary last archived a WAL segment (-1: never).",
              archive.map { $0.secondsSinceLastArchived ?? -1 } ?? .nan)
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: MetricsExposition.render(metrics, readings: readings))))
    }
}
