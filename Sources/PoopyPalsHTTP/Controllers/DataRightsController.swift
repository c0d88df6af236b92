import Foundation
import Hummingbird
import NIOCore
import PoopyPalsData

/// What a person can do with their own data without asking anyone: change the device id (after a phone
/// migration), take everything out, and erase it. Each acts on the calling device only (sql/0010).
struct DataRightsController: Sendable {
    let devices: DeviceRepository
    let export: DeviceExport
    let gate: ExportGate
    let tokens: TokenVerifier

    init(devices: DeviceRepository, export: DeviceExport, tokens: TokenVerifier, maxExports: Int = 4) {
        self.devices = devices
        self.export = export
        self.tokens = tokens
        gate = ExportGate(limit: maxExports)
    }

    func register(on router: Router<APIContext>) {
        router.post("/v1/device/rotate", use: rotate)
        router.delete("/v1/device", use: erase)
        router.get("/v1/export", use: exportAll)
    }

    /// The subject of the request's bearer token, if it sent one (a token sent must be valid: 401 otherwise).
    private func optionalSubject(_ request: Request) async throws -> UUID? {
        guard let authorization = request.headers[.authorization] else { return nil }
        return try await tokens.verify(authorization: authorization).userID
    }

    /// The phone makes and stores the new id before calling: if the answer is lost, the new id tells.
    @Sendable func rotate(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let body = try await JSONBody.read(request, context: context, allowed: ["newDeviceId"])
        let newUUID = try body.required("newDeviceId", body.uuid)
        // The nil UUID cannot even be a DeviceID; every other weak id is refused by the repository.
        guard let newID = try? DeviceID(newUUID) else { throw APIError.weakDeviceID }
        do {
            return try JSONResponse.make(.ok, writing: DeviceBody(try await devices.rotate(as: device, to: newID)))
        } catch RepositoryError.deviceNotRegistered {
            throw APIError(.notFound, "not_found", "this device is not registered")
        }
    }

    /// The profile goes too only with a token of its subject (and when no other device links to it): the device id
    /// alone does not erase a person's account.
    @Sendable func erase(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let subject = try await optionalSubject(request)
        guard let erasure = try await devices.erase(as: device, subject: subject) else {
            throw APIError(.notFound, "not_found", "this device is not registered (or was already erased)")
        }
        guard erasure.logsRemaining > 0 else { return Response(status: .noContent) }
        // Under way: the id already works for nothing else; the rest goes in the background, and the same
        // DELETE reports progress (404 once it is over).
        return try JSONResponse.make(.accepted, writing: ErasureProgressBody(logsRemaining: erasure.logsRemaining))
    }

    /// `{"device": …, "profile": …, "logs": [… oldest first …]}`. The transaction reads it into a spool (memory,
    /// then an unlinked temporary file) and commits; only then is it streamed, at the reader's pace, with no database
    /// connection held. At most `gate`'s number of exports at once, one per device.
    @Sendable func exportAll(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let consistency = try request.consistencyToken()
        let subject = try await optionalSubject(request)
        guard gate.enter(device) else { throw APIError.exportBusy }
        var handedOver = false
        defer { if !handedOver { gate.leave(device) } }
        let spool = ExportSpool()
        let batches = BatchCounter()
        let found = try await export.run(as: device, consistency: consistency, profileOwner: subject) { part in
            var output = JSONOutput(capacity: 4096)
            switch part {
            case .header(let device, let profile, let linked):
                try ExportHead(device: DeviceBody(device), profile: profile.map(UserBody.init), profileLinked: linked).write(to: &output)
            case .logs(let logs):
                if batches.next() > 0 { output.raw(",") }
                try logs.map(LogBody.init).writeElements(to: &output)
            }
            try spool.append(output.bytes)
        }
        guard found else { throw APIError(.notFound, "not_found", "this device is not registered") }
        try spool.append(Array("]}".utf8))
        handedOver = true
        let gate = gate
        let logger = context.logger, requestID = context.requestID
        return Response(status: .ok, headers: [.contentType: JSONResponse.contentType, .cacheControl: "no-store",
                                               .contentLength: String(spool.count)],
                        body: ResponseBody { writer in
            // The slot goes back before the last bytes are written, not after: a phone that has read them may ask for
            // its export again at once, and was answered 429 export_busy when its next request came first.
            var left = false
            defer { if !left { gate.leave(device) } }
            do {
                while let chunk = try spool.read(upTo: 64 * 1024) {
                    if spool.isRead && !left {
                        gate.leave(device)
                        left = true
                    }
                    try await writer.write(ByteBuffer(bytes: chunk))
                }
                try await writer.finish(nil)
            } catch {
                // Headers are gone: the client sees a cut-off body, never a valid-looking partial export.
                logger.warning("export stopped", metadata: ["request_id": "\(requestID)", "error": "\(type(of: error))"])
                throw error
            }
        })
    }
}

/// Counts the batches of one export; touched only by the connection's thread that produces them.
private final class BatchCounter: @unchecked Sendable {
    private var count = 0

    /// The number of batches before this one.
    func next() -> Int {
        defer { count += 1 }
        return count
    }
}
