import Foundation

/// What one timed run measured.
struct Measurement: Sendable, Encodable {
    let operations: Int
    let seconds: Double
    let p50Milliseconds: Double?
    let p99Milliseconds: Double?
    var averageMilliseconds: Double? = nil
    var opsPerSecond: Double { Double(operations) / seconds }
}

/// Runs `operation` from `concurrency` tasks until `duration` has passed (and never more than
/// `maxOperations` in all), recording each operation's latency.
func runLoad(
    concurrency: Int, duration: Duration, maxOperations: Int = 10_000_000,
    _ operation: @escaping @Sendable (_ worker: Int) async throws -> Void
) async throws -> Measurement {
    let clock = ContinuousClock()
    let started = clock.now
    let deadline = started + duration
    let perWorkerCap = max(1, maxOperations / concurrency)
    let latencies = try await withThrowingTaskGroup(of: [Duration].self) { group in
        for worker in 0..<concurrency {
            group.addTask {
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
    let sorted = latencies.sorted()
    func percentile(_ p: Double) -> Double? {
        guard !sorted.isEmpty else { return nil }
        let value = sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
        return Double(value.components.attoseconds) / 1e15 + Double(value.components.seconds) * 1000
    }
    return Measurement(operations: sorted.count, seconds: seconds(elapsed),
                       p50Milliseconds: percentile(0.50), p99Milliseconds: percentile(0.99))
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}
