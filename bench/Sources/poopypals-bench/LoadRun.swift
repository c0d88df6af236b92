import Foundation
import Histogram

/// What one timed run measured.
struct Measurement: Sendable, Codable {
    let operations: Int
    let seconds: Double
    let p50Milliseconds: Double?
    let p99Milliseconds: Double?
    var averageMilliseconds: Double? = nil
    /// Client CPU (user + system) and context switches per operation (`Usage`).
    var cpuMicrosecondsPerOperation: Double? = nil
    var contextSwitchesPerOperation: Double? = nil
    var opsPerSecond: Double { Double(operations) / seconds }
}

/// Runs `operation` from `concurrency` tasks until `duration` has passed (and never more than
/// `maxOperations` in all), recording each operation's latency. With `executor`, the tasks prefer it (ours: the
/// pool's threads, as the HTTP server runs every connection).
func runLoad(
    concurrency: Int, duration: Duration, maxOperations: Int = 10_000_000, executor: (any TaskExecutor)? = nil,
    _ operation: @escaping @Sendable (_ worker: Int) async throws -> Void
) async throws -> Measurement {
    let clock = ContinuousClock()
    let usage = Usage.ofThisProcess()
    let started = clock.now
    let deadline = started + duration
    let perWorkerCap = max(1, maxOperations / concurrency)
    let latencies = try await withThrowingTaskGroup(of: [Duration].self) { group in
        for worker in 0..<concurrency {
            group.addTask(executorPreference: executor) {
                var samples: [Duration] = []
                samples.reserveCapacity(100_000)
                while clock.now < deadline && samples.count < perWorkerCap {
                    let begin = clock.now
                    try await operation(worker)
                    samples.append(clock.now - begin)
                }
                return samples
            }
        }
        return try await group.reduce(into: [Duration]()) { $0 += $1 }
    }
    let elapsed = clock.now - started
    // Percentiles from an HDR histogram of microseconds (3 significant digits), not by sorting every sample.
    var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
    for latency in latencies {
        let micros = latency.components.seconds * 1_000_000 + latency.components.attoseconds / 1_000_000_000_000
        _ = histogram.record(UInt64(clamping: max(1, micros)))
    }
    func percentile(_ p: Double) -> Double? {
        histogram.totalCount == 0 ? nil : Double(histogram.valueAtPercentile(p * 100)) / 1000
    }
    let perOperation = usage.perOperation(until: Usage.ofThisProcess(), operations: latencies.count)
    return Measurement(operations: latencies.count, seconds: seconds(elapsed),
                       p50Milliseconds: percentile(0.50), p99Milliseconds: percentile(0.99),
                       cpuMicrosecondsPerOperation: perOperation?.cpu, contextSwitchesPerOperation: perOperation?.switches)
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}
