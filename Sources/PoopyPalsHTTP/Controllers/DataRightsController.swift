import Foundation
import Hummingbird
import NIOCore
import PoopyPalsData

/// What a person can do with their own data without asking anyone: change the device id (after a phone
/// migration), take everything out, and erase it. Each acts on the calling device only (sql/0010).
struct DataRightsController: Sendable {
    let devices: DeviceRepository
    let export: DeviceExport

    init(devices: DeviceRepository, export: DeviceExport) {
        self.devices = devices
        self.export = export
    }

    func register(on router: Router<APIContext>) {
        router.post("/v1/device/rotate", use: rotate)
        router.delete("/v1/device", use: erase)
        router.get("/v1/export", use: exportAll)
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

    @Sendable func erase(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        guard try await devices.erase(as: device) != nil else {
            throw APIError(.notFound, "not_found", "this device is not registered (or was already erased)")
        }
        return Response(status: .noContent)
    }

    /// `{"device": …, "profile": …, "logs": [… oldest first …]}`, streamed as it is read: the reader's
    /// pace decides how fast the database is read, and at most a few batches are held at once.
    @Sendable func exportAll(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let consistency = try request.consistencyToken()
        let channel = ChunkChannel()
        let export = export
        let producer = Task {
            do {
                let batches = BatchCounter()
                let found = try await export.run(as: device, consistency: consistency) { part in
                    var output = JSONOutput(capacity: 4096)
                    switch part {
                    case .header(let device, let profile):
                        try ExportHead(device: DeviceBody(device), profile: profile.map(UserBody.init)).write(to: &output)
                    case .logs(let logs):
                        if batches.next() > 0 { output.raw(",") }
                        try logs.map(LogBody.init).writeElements(to: &output)
                    }
                    try channel.send(Data(output.bytes))
                }
                if found { try channel.send(Data("]}".utf8)) }
                channel.finish(found ? nil : APIError(.notFound, "not_found", "this device is not registered"))
            } catch {
                channel.finish(error)
            }
        }
        // The status depends on the device existing: wait for the header before answering.
        let head: Data?
        do {
            head = try await channel.next()
        } catch {
            channel.cancel()
            producer.cancel()
            throw error
        }
        guard let head else { throw APIError.internalError }
        return Response(status: .ok, headers: [.contentType: JSONResponse.contentType, .cacheControl: "no-store"],
                        body: ResponseBody { writer in
            do {
                try await writer.write(ByteBuffer(bytes: head))
                while let chunk = try await channel.next() { try await writer.write(ByteBuffer(bytes: chunk)) }
                try await writer.finish(nil)
            } catch {
                // Headers are gone: the client sees a cut-off body, never a valid-looking partial export.
                channel.cancel()
                producer.cancel()
                context.logger.warning("export stopped", metadata: ["request_id": "\(context.requestID)", "error": "\(type(of: error))"])
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
