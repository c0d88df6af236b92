import Logging
import PoopyPalsData
import PostgresClient
import ServiceLifecycle

/// Finishes device erasures in the background (`PendingErasures`): every `interval`, a batch at a time until none
/// is left, each in a transaction of its own on the request pool. It yields to requests: a batch starts only while
/// no request waits for a connection and at least half of the pool is free, so it holds at most one connection,
/// briefly, and never one a request needs. Each instance runs one; they share the work through the database. Stops
/// at shutdown.
struct ErasureWorker: Service {
    let erasures: PendingErasures
    let pool: ConnectionPool
    let poolSize: Int
    let interval: Duration
    let logger: Logger

    /// True while requests could use the connection a batch would take.
    private var requestsNeedThePool: Bool {
        let statistics = pool.statistics
        return statistics.waiting > 0 || (statistics.inUse + 1) * 2 > max(poolSize, 2)
    }

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: interval)
                var done = PendingErasures.Progress()
                do {
                    // Bounded: at most 1 000 batches (5 000 000 logs) before the next pause.
                    while done.batches < 1_000, !requestsNeedThePool {
                        let step = try await erasures.step()
                        done.logsErased += step.logsErased
                        done.devicesErasing = step.devicesErasing
                        done.batches += 1
                        if step.devicesErasing == 0 { break }
                        try await Task.sleep(for: .milliseconds(20))
                    }
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
