import Foundation

/// One line of the report: a scenario at one concurrency, over all rounds.
struct ReportRow: Encodable {
    let scenario: String
    let concurrency: Int
    let ours: [Measurement]
    let pgbench: [Measurement]
    let roundTrips: Int

    /// Our ops/s over pgbench's, per round (runs alternate, so each pair shares the same conditions).
    var ratios: [Double] { zip(ours, pgbench).map { $0.opsPerSecond / $1.opsPerSecond } }

    private static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

    var line: String {
        let oursRate = Self.median(ours.map(\.opsPerSecond))
        let theirRate = Self.median(pgbench.map(\.opsPerSecond))
        let p50 = Self.median(ours.compactMap(\.p50Milliseconds))
        let p99 = Self.median(ours.compactMap(\.p99Milliseconds))
        return String(format: "| %@ | %d | %.0f | %.0f | %.2f–%.2f | %.2f / %.2f ms | %d |",
                      scenario, concurrency, oursRate, theirRate, ratios.min() ?? 0, ratios.max() ?? 0, p50, p99, roundTrips)
    }

    static func table(_ rows: [ReportRow]) -> String {
        (["| scenario | concurrency | ours ops/s | pgbench ops/s | ratio (min–max) | ours p50 / p99 | round trips |",
          "|---|---|---|---|---|---|---|"] + rows.map(\.line)).joined(separator: "\n")
    }

    static func write(_ rows: [ReportRow], to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(rows).write(to: url)
    }
}
