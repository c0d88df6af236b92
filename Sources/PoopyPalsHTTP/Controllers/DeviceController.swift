import Hummingbird
import PoopyPalsData
import Values

/// `/v1/device`: a phone registers itself (every launch) and reads its registration.
struct DeviceController: Sendable {
    let devices: DeviceRepository
    /// Whose registration bucket a new device takes (sql/0015).
    var clientNetwork = ClientNetwork()

    func register(on router: Router<APIContext>) {
        router.put("/v1/device", use: put)
        router.get("/v1/device", use: get)
    }

    @Sendable func put(_ request: Request, context: APIContext) async throws -> Response {
        // The nil UUID is no device's id: as a new registration it is the weakest id there is.
        if request.headers[.deviceID].flatMap(UUIDText.parse) == DeviceID.nilUUID { throw APIError.weakDeviceID }
        let device = try context.device()
        let body = try await JSONBody.read(request, context: context,
                                           allowed: ["model", "osVersion", "appVersion", "buildNumber", "isSimulator"],
                                           serverOwned: ["id", "userId", "createdAt", "lastSeenAt"])
        let info = DeviceInfo(model: try body.string("model"), osVersion: try body.string("osVersion"),
                              appVersion: try body.string("appVersion"), buildNumber: try body.string("buildNumber"),
                              isSimulator: try body.bool("isSimulator") ?? false)
        let buckets = clientNetwork.bucketKeys(of: request, context: context)
        let registration = try await devices.register(info, as: device, network: buckets?.network, wideNetwork: buckets?.wide)
        return try JSONResponse.make(registration.created ? .created : .ok, writing: DeviceBody(registration.device))
    }

    @Sendable func get(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        guard let row = try await devices.current(as: device, consistency: try request.consistencyToken()) else {
            throw APIError(.notFound, "not_found", "this device is not registered")
        }
        return try JSONResponse.make(.ok, writing: DeviceBody(row))
    }
}

extension Request {
    /// The `Consistency-Token` a read sent back (a write's answer), so that it is served no older than that write.
    /// - Throws: `InvalidField` (400) for a value this service did not make.
    func consistencyToken() throws -> ConsistencyToken? {
        guard let value = headers.value(of: .consistencyToken) else { return nil }
        return try ConsistencyToken(encoded: value)
    }
}
