import Foundation
import Hummingbird
import PoopyPalsData
import Values

/// `/v1/logs`: a device's logs, created with the id the phone chose (a replay returns the log), listed newest
/// first by cursor, read, changed and deleted one by one.
struct LogsController: Sendable {
    let logs: PoopLogRepository

    // The fields each body takes and those the server owns: made once, not hashed into a new set per request.
    static let createFields: Set<String> = ["id", "occurredAt", "bristolType", "notes"]
    static let createServerOwned: Set<String> = ["deviceId", "createdAt", "updatedAt"]
    static let patchFields: Set<String> = ["occurredAt", "bristolType", "notes"]
    static let patchServerOwned: Set<String> = ["id", "deviceId", "createdAt", "updatedAt"]

    func register(on router: Router<APIContext>) {
        router.post("/v1/logs", use: create)
        router.get("/v1/logs", use: list)
        router.get("/v1/logs/{id}", use: get)
        router.patch("/v1/logs/{id}", use: patch)
        router.delete("/v1/logs/{id}", use: delete)
    }

    @Sendable func create(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let body = try await JSONBody.read(request, context: context, allowed: Self.createFields,
                                           serverOwned: Self.createServerOwned)
        let new = NewPoopLog(id: try body.uuid("id"), occurredAt: try body.required("occurredAt", body.timestamp),
                             bristolType: try body.required("bristolType", body.int), notes: try body.string("notes"))
        let (log, created) = try await logs.create(new, as: device)
        return try JSONResponse.make(created ? .created : .ok, writing: LogBody(log))
    }

    @Sendable func list(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        var limit = 50
        if let text = StrictQuery.value("limit", in: request.uri) {
            guard let value = Int(text) else { throw APIError.invalid("limit", "must be an integer") }
            limit = value
        }
        let page = try await logs.list(before: StrictQuery.value("before", in: request.uri), limit: limit, as: device, consistency: try request.consistencyToken())
        return try JSONResponse.make(.ok, writing: LogPageBody(items: page.items.map(LogBody.init), nextCursor: page.nextCursor))
    }

    @Sendable func get(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        guard let log = try await logs.get(try Self.logID(context), as: device, consistency: try request.consistencyToken()) else {
            throw APIError.notFound
        }
        return try JSONResponse.make(.ok, writing: LogBody(log))
    }

    @Sendable func patch(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let id = try Self.logID(context)
        let body = try await JSONBody.read(request, context: context, allowed: Self.patchFields,
                                           serverOwned: Self.patchServerOwned)
        try body.refuseNull("occurredAt")
        try body.refuseNull("bristolType")
        var patch = PoopLogPatch(occurredAt: try body.timestamp("occurredAt"), bristolType: try body.int("bristolType"))
        if body.isNull("notes") { patch.notes = .clear } else if let notes = try body.string("notes") { patch.notes = notes.isEmpty ? .clear : .set(notes) }
        guard let log = try await logs.update(id, patch, as: device) else { throw APIError.notFound }
        return try JSONResponse.make(.ok, writing: LogBody(log))
    }

    @Sendable func delete(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        guard try await logs.delete(try Self.logID(context), as: device) else { throw APIError.notFound }
        return Response(status: .noContent)
    }

    static func logID(_ context: APIContext) throws -> UUID {
        guard let text = context.parameters.get("id"), let id = UUIDText.parse(text) else { throw APIError.invalid("id", "must be a UUID") }
        return id
    }
}
