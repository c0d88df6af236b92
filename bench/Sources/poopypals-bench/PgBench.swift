import Foundation

/// Runs `pgbench` with a custom script against the same server, the reference for each scenario.
struct PgBench {
    let connectionString: String

    /// - Throws: when pgbench is missing, fails, or prints no tps line.
    func run(script: String, concurrency: Int, seconds: Int) async throws -> Measurement {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-bench-\(UUID().uuidString).sql")
        try script.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        // -n: skip vacuuming pgbench's own tables; -M prepared: named prepared statements, like our cache.
        let usage = Usage.ofChildren()
        let (status, text) = try await Child.run(["pgbench", "-n", "-M", "prepared", "-c", "\(concurrency)",
                                           "-j", "\(min(concurrency, 2))", "-T", "\(seconds)", "-f", file.path, connectionString])
        guard status == 0 else { throw BenchError("pgbench exited with \(status)") }
        func number(after label: String) -> Double? {
            guard let line = text.split(separator: "\n").first(where: { $0.contains(label) }) else { return nil }
            return line.split(whereSeparator: { $0 == " " || $0 == "=" }).compactMap { Double($0) }.first
        }
        guard let processed = number(after: "number of transactions actually processed"),
              let latency = number(after: "latency average")
        else { throw BenchError("pgbench printed no result") }
        // pgbench has exited and been waited for: its CPU and switches are in this process's children's usage.
        let perOperation = usage.perOperation(until: Usage.ofChildren(), operations: Int(processed))
        return Measurement(operations: Int(processed), seconds: Double(seconds),
                           p50Milliseconds: nil, p99Milliseconds: nil, averageMilliseconds: latency,
                           cpuMicrosecondsPerOperation: perOperation?.cpu, contextSwitchesPerOperation: perOperation?.switches)
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
