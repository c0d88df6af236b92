import Logging
import PoopyPalsData
import ServiceLifecycle

/// Finishes device erasures in the background (`PendingErasures`): every `interval`, batches until none is left,
/// with a pause between batches so that it holds at most one pooled connection, briefly, at a time. Each instance
/// runs one; they share the work through the database. Stops at shutdown.
struct ErasureWorker: Service {
    let erasures: PendingErasures
    let interval: Duration
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let done = try await erasures.run(maxBatches: 1_000, until: .now + .seconds(60), pause: .milliseconds(20))
                    if done.logsErased > 0 || done.batches > 1 {
                        logger.info("erasures continued", metadata: ["logs": "\(done.logsErased)", "batches": "\(done.batches)",
                                                                     "devices_left": "\(done.devicesErasing)"])
                    }
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    logger.warning("erasures could not continue; retrying later", metadata: ["error": "\(error)"])
                }
                try await Task.sleep(for: interval)
            }
        }
    }
}
