import Hummingbird
import PoopyPalsData
import PostgresClient
import Prometheus

/// The API's controllers, one per resource, each registering its own routes. Handlers never filter by device
/// themselves beyond naming it: the device id becomes `app.device_id` of the request transaction and row-level
/// security does the rest.
struct APIControllers: Sendable {
    let device: DeviceController
    let logs: LogsController
    let profile: ProfileController
    let sync: SyncController
    let dataRights: DataRightsController
    let operations: OperationsController

    /// Repositories are made once here: a repository resolves its metrics when it is created, which is no work
    /// for every request.
    init(database: Database, probe: ConnectionPool? = nil, tokens: TokenVerifier, metrics: PrometheusCollectorRegistry,
         maxExports: Int = 4, clientNetwork: ClientNetwork = ClientNetwork(), schema: SchemaGate? = nil) {
        let devices = DeviceRepository(database: database)
        device = DeviceController(devices: devices, clientNetwork: clientNetwork)
        logs = LogsController(logs: PoopLogRepository(database: database))
        profile = ProfileController(users: UserRepository(database: database), devices: devices, tokens: tokens)
        sync = SyncController(sync: SyncRepository(database: database))
        dataRights = DataRightsController(devices: devices, export: DeviceExport(database: database), tokens: tokens,
                                          maxExports: maxExports)
        operations = OperationsController(database: database, probe: probe, metrics: metrics, schema: schema)
    }

    func register(on router: Router<APIContext>) {
        device.register(on: router)
        logs.register(on: router)
        profile.register(on: router)
        sync.register(on: router)
        dataRights.register(on: router)
        operations.register(on: router)
    }
}
