import Foundation
import Hummingbird
import PoopyPalsData

/// `GET /v1/sync` (pull) and `POST /v1/sync` (push): the offline-first protocol over `SyncRepository`.
struct SyncController: Sendable {
    let sync: SyncRepository

    static let pushFields: Set<String> = ["operations", "cursor"]
    static let operationFields: Set<String> = ["op", "log", "id", "baseVersion"]

    func register(on router: Router<APIContext>) {
        router.get("/v1/sync", use: pull)
        router.post("/v1/sync", use: push)
    }

    @Sendable func pull(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        var limit = 100
        if let text = StrictQuery.value("limit", in: request.uri) {
            guard text.count <= 4, let value = Int(text) else { throw APIError.invalid("limit", "must be an integer") }
            limit = value
        }
        let page = try await sync.pull(cursor: StrictQuery.value("cursor", in: request.uri), limit: limit, as: device,
                                       consistency: try request.consistencyToken())
        return try JSONResponse.make(.ok, writing: SyncPageBody(page))
    }

    @Sendable func push(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let body = try await JSONBody.read(request, context: context, allowed: Self.pushFields)
        guard case .array(let items)? = body.value("operations") else { throw APIError.invalid("operations", "is required: an array") }
        let operations = try items.enumerated().map { index, item in try Self.operation(item, index: index) }
        let outcome = try await sync.push(operations, as: device, continuing: try body.string("cursor"))
        return try JSONResponse.make(.ok, writing: PushBody(results: outcome.results.map { .init(id: $0.0.lowercased, status: $0.1.rawValue) },
                                                   cursor: outcome.cursor))
    }

    /// Where a field the data layer names (`SyncError.invalidOperation`) is in a push's body: the operation itself,
    /// its `baseVersion`, or one of its log's fields (`operations[3].log.notes`).
    static func path(ofOperation index: Int, field: String? = nil) -> String {
        switch field {
        case nil: "operations[\(index)]"
        case "baseVersion"?: "operations[\(index)].baseVersion"
        case let field?: "operations[\(index)].log.\(field)"
        }
    }

    static func operation(_ item: JSONValue, index: Int) throws -> SyncOperation {
        let prefix = path(ofOperation: index)
        let operation = try JSONBody.nested(item, prefix: prefix, allowed: Self.operationFields)
        switch try operation.string("op") {
        case "upsert":
            guard let value = operation.value("log") else { throw APIError.invalid("\(prefix).log", "is required") }
            let log = try JSONBody.nested(value, prefix: "\(prefix).log", allowed: LogsController.createFields)
            func field<T>(_ read: () throws -> T) throws -> T { try named("\(prefix).log", read) }
            let baseVersion: Int64?
            do {
                baseVersion = try operation.int("baseVersion").map(Int64.init)
            } catch {
                throw APIError.invalid("\(prefix).baseVersion", "must be an integer from 0 to 2^53 - 1")
            }
            if let baseVersion, baseVersion < 0 {
                throw APIError.invalid("\(prefix).baseVersion", "must be an integer from 0 to 2^53 - 1")
            }
            return .upsert(id: try field { try log.required("id", log.uuid) },
                           occurredAt: try field { try log.required("occurredAt", log.timestamp) },
                           bristolType: try field { try log.required("bristolType", log.int) },
                           notes: try field { try log.string("notes") }, baseVersion: baseVersion)
        case "delete":
            guard operation.value("log") == nil, operation.value("baseVersion") == nil else {
                throw APIError.invalid(prefix, "a delete takes only op and id")
            }
            return .delete(id: try named(prefix) { try operation.required("id", operation.uuid) })
        default:
            throw APIError.invalid("\(prefix).op", "must be \"upsert\" or \"delete\"")
        }
    }

    /// Runs `read`, naming a field error it throws with the path of its nested object (`operations[3].log.…`).
    private static func named<T>(_ path: String, _ read: () throws -> T) throws -> T {
        do { return try read() } catch let error as APIError {
            throw APIError(error.status, error.code, "\(path).\(error.message)")
        }
    }
}
