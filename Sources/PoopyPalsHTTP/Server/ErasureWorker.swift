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
