import Logging
import PoopyPalsData
import ServiceLifecycle

/// Finishes device erasures in the background (`PendingErasures`): every `interval`, a batch at a time until none
/// is left, each in a transaction of its own, on a connection of its own (`APIPools.background`): it never takes a
/// connection a request could use, nor a probe's. Each instance runs one; they share the work through the database.
/// Stops at shutdown.
struct ErasureWorker: Service {
    let erasures: PendingErasures
    let interval: Duration
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: interval)
                var done = PendingErasures.Progress()
                do {
                    // Bounded: at most 1 000 batches (5 000 000 logs) or 10 minutes before the next pause.
                    done = try await erasures.run(maxBatches: 1_000, until: .now + .seconds(600), pause: .milliseconds(20))
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    logger.warning("erasures could not continue; retrying later", metadata: ["error": "\(error)"])
                }
                if done.logsErased > 0 {
                    logger.info("erasures continued", metadata: ["logs": "\(done.logsErased)", "batches": "\(done.batches)",
                                                                 "devices_left": "\(done.devicesErasing)"])
                }
            }
        }
    }
}
