import Logging
import PoopyPalsData
import ServiceLifecycle

/// Deletes the registration buckets that have refilled to their burst (`RegistrationBuckets`), every `interval`, on
/// the background connection: the registration limit keeps no network longer than it limits it (issue 58). Each
/// instance runs one; the work is a statement any of them may run. Stops at shutdown.
struct BucketSweeper: Service {
    let database: Database
    let interval: Duration
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: interval)
                do {
                    let forgotten = try await RegistrationBuckets.forgetFull(database)
                    if forgotten > 0 { logger.debug("registration buckets forgotten", metadata: ["buckets": "\(forgotten)"]) }
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    logger.warning("registration buckets could not be swept; retrying later", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
