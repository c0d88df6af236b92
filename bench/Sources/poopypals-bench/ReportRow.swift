import Foundation
import PoopyPalsData

/// One scenario at one concurrency, over all rounds.
struct ReportRow: Encodable {
    let scenario: String
    let concurrency: Int
    let ours: [Measurement]
    let pgbench: [Measurement]
    /// vapor/postgres-nio doing the same transaction (`NIOPeer`); empty when not run.
    let nio: [Measurement]
    /// Request/response turns of one request, from libpq's trace: steady state and a device's first request.
    let roundTrips: RoundTrips.Counted

    /// Our ops/s over pgbench's, per round (runs alternate, so each pair shares the same conditions).
    var ratios: [Double] { zip(ours, pgbench).map { $0.opsPerSecond / $1.opsPerSecond } }
    var nioRatios: [Double] { zip(ours, nio).map { $0.opsPerSecond / $1.opsPerSecond } }
    var oursRate: Double { median(ours.map(\.opsPerSecond)) }

    var line: String {
        func usage(_ runs: [Measurement], _ value: KeyPath<Measurement, Double?>, _ format: String) -> String {
            let values = runs.compactMap { $0[keyPath: value] }
            return values.isEmpty ? "–" : String(format: format, median(values))
        }
        let nioRate = nio.isEmpty ? "–" : String(format: "%.0f", median(nio.map(\.opsPerSecond)))
        let nioRatio = nio.isEmpty ? "–" : String(format: "%.2f", nioRatios.min() ?? 0)
        let cpu = [ours, pgbench, nio].map { usage($0, \.cpuMicrosecondsPerOperation, "%.0f") }.joined(separator: " / ")
        let switches = [ours, pgbench, nio].map { usage($0, \.contextSwitchesPerOperation, "%.1f") }.joined(separator: " / ")
        return String(format: "| %@ | %d | %.0f | %.0f | %.2f–%.2f | %@ | %@ | %.2f / %.2f ms | %@ | %@ | %@ |",
                      scenario, concurrency, oursRate, median(pgbench.map(\.opsPerSecond)), ratios.min() ?? 0, ratios.max() ?? 0,
                      nioRate, nioRatio, median(ours.compactMap(\.p50Milliseconds)), median(ours.compactMap(\.p99Milliseconds)),
                      cpu, switches, roundTrips.cell)
    }
}

func median(_ values: [Double]) -> Double { values.isEmpty ? 0 : values.sorted()[values.count / 2] }

/// Everything one `make bench` measured.
struct Report: Encodable {
    let date: String
    let machine: String
    let secondsPerRun: Int
    let rounds: Int
    let scenarios: [ReportRow]
    let scaling: [ScalingRow]
    let http: [HTTPRow]
    let instructions: [InstructionRow]
    let breakdown: [BreakdownRow]
    let readScale: [ReadScaleRow]
    /// Each request transaction against its floor (`DatabaseFloor`); empty when not run.
    var floor: [DatabaseFloor.Row] = []
    /// The scenarios on Citus beside the plain server (`CitusRouting`); empty when not run.
    var citus: [CitusRouting.Row] = []
    /// The instruction budget's lines (`InstructionBudget`), as markdown; empty when nothing was counted.
    var budget = ""
    /// Client CPU of deriving a device key from an id (`DeviceID(validating:)`: parse + SHA-256), once per request.
    let keyDerivationNanoseconds: Double

    /// Times `DeviceID(validating:)` on one thread: what every request pays before it is sent.
    static func measureKeyDerivation(iterations: Int = 200_000) -> Double {
        let ids = (0..<1000).map { _ in UUID().uuidString }
        var sink = 0
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            for index in 0..<iterations {
                if let device = try? DeviceID(validating: ids[index % ids.count]) { sink &+= Int(device.key.uuid.0) }
            }
        }
        if sink == -1 { print(sink) }  // keeps the loop from being optimised away
        let nanoseconds = Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
        return nanoseconds / Double(iterations)
    }

    static func machine() -> String {
        let cpu = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?.split(separator: "\n")
            .first { $0.hasPrefix("model name") }.map { String($0.split(separator: ":").last ?? "").trimmingCharacters(in: .whitespaces) } ?? "unknown CPU"
        return "\(ProcessInfo.processInfo.activeProcessorCount) cores (\(cpu)), \(ProcessInfo.processInfo.physicalMemory / 1_073_741_824) GiB"
    }

    var markdown: String {
        var text = "Measured \(date) on \(machine); \(secondsPerRun) s per run, \(rounds) alternating rounds (ours, pgbench, postgres-nio).\n"
        text += "Ratios are per round (min–max); vs postgres-nio: the smallest. CPU and context switches are the client's, per request "
        text += "(`getrusage`: our whole process; pgbench's process; the postgres-nio peer's process, one per run).\n\n"
        if !scenarios.isEmpty {
            text += "| scenario | concurrency | ours ops/s | pgbench ops/s | ours / pgbench | postgres-nio ops/s | ours / postgres-nio | ours p50 / p99 | CPU µs per request (ours / pgbench / nio) | context switches per request (ours / pgbench / nio) | round trips (steady / a device's first) |\n"
            text += "|---|---|---|---|---|---|---|---|---|---|---|\n"
            text += scenarios.map(\.line).joined(separator: "\n") + "\n"
        }
        text += String(format: "\nDevice key derivation (`DeviceID(validating:)`: parse, SHA-256; once per request, on the client): %.2f µs.\n",
                       keyDerivationNanoseconds / 1000)
        if !scaling.isEmpty {
            text += "\nScaling of “list 20 newest logs” (concurrency 8, median of the rounds after a warm-up; every device has at least 21 logs, so every request returns 20):\n\n"
            text += "| rows | devices | logs per device | ops/s | p99 | vs smallest | pgbench ops/s (same SQL, same data) | vs pgbench |\n|---|---|---|---|---|---|---|---|\n"
            let first = scaling.first?.measurement.opsPerSecond ?? 0
            text += scaling.map {
                String(format: "| %d | %d | %d | %.0f | %.2f ms | %.2f | %.0f | %.2f |", $0.rows, $0.devices, $0.rows / max(1, $0.devices),
                       $0.measurement.opsPerSecond, $0.measurement.p99Milliseconds ?? 0,
                       first > 0 ? $0.measurement.opsPerSecond / first : 0,
                       $0.pgbench.opsPerSecond, $0.pgbench.opsPerSecond > 0 ? $0.measurement.opsPerSecond / $0.pgbench.opsPerSecond : 0)
            }.joined(separator: "\n") + "\n"
            if let largest = scaling.last {
                text += "\nPlan under row-level security at \(largest.rows) rows:\n\n```\n\(largest.plan)\n```\n"
            }
        }
        if !http.isEmpty {
            text += "\nHTTP (`wrk -t2` with 32 and 64 connections; release `poopypals serve --pool-size 16`, and the \(HTTPLoad.peerName) peer with 16 connections, same SQL):\n\n"
            text += "| server | route | connections | req/s | p50 / p99 | non-2xx | server peak RSS | server CPU µs / context switches per request (involuntary) | PostgreSQL CPU µs per request | machine idle | data layer ops/s just before (list for GET, create for POST) | vs data layer | ours / peer |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            for row in http {
                let reference = row.dataLayerRequestsPerSecond
                    ?? scenarios.first { $0.concurrency == row.connections && $0.scenario == HTTPLoad.scenarioName(for: row.route) }?.oursRate
                let ratio = reference.map { String(format: "%.2f", row.requestsPerSecond / max(1, $0)) } ?? "–"
                let dataLayer = row.dataLayerRequestsPerSecond.map { String(format: "%.0f", $0) } ?? "–"
                let peer = http.first { $0.server == HTTPLoad.peerName && $0.route == row.route && $0.connections == row.connections }
                let versus = row.server == "poopypals" ? (peer.map { String(format: "%.2f", row.requestsPerSecond / max(1, $0.requestsPerSecond)) } ?? "–") : "–"
                let usage = String(format: "%.0f / %.1f (%.1f)", row.serverCPUMicrosecondsPerRequest ?? 0, row.serverContextSwitchesPerRequest ?? 0,
                                   row.serverInvoluntarySwitchesPerRequest ?? 0)
                let idle = row.machineIdleShare.map { String(format: "%.0f %%", $0 * 100) } ?? "–"
                let postgres = row.postgresCPUMicrosecondsPerRequest.map { String(format: "%.0f", $0) } ?? "–"
                text += String(format: "| %@ | %@ | %d | %.0f | %.2f / %.2f ms | %d | %.1f MiB | %@ | %@ | %@ | %@ | %@ | %@ |\n", row.server, row.route, row.connections, row.requestsPerSecond,
                               row.p50Milliseconds ?? 0, row.p99Milliseconds ?? 0, row.non2xx, row.serverPeakRSSMiB ?? 0, usage, postgres, idle,
                               row.server == "poopypals" ? dataLayer : "–", row.server == "poopypals" ? ratio : "–", versus)
            }
        }
        if !instructions.isEmpty {
            text += "\nServer instructions per request (valgrind's callgrind: counted, not timed; `wrk -t1 -c\(InstructionCount.connections)` after a warm-up; everything the server process ran, every thread):\n\n"
            text += "| server | route | requests counted | instructions per request | ours / peer |\n|---|---|---|---|---|\n"
            for row in instructions {
                let peer = instructions.first { $0.server == HTTPLoad.peerName && $0.route == row.route }
                let versus = row.server == "poopypals" ? (peer.map { String(format: "%.2f", row.instructionsPerRequest / max(1, $0.instructionsPerRequest)) } ?? "–") : "–"
                text += String(format: "| %@ | %@ | %d | %.0f | %@ |\n", row.server, row.route, row.requests, row.instructionsPerRequest, versus)
            }
        }
        if !breakdown.isEmpty {
            text += "\nThe data layer's client instructions per request, by part (callgrind; each scenario alone, one request at a time on one connection, \(breakdown.first?.operations ?? 0) requests after a warm-up that served every device once; "
            text += "each function's own instructions, given to the part its name or library says; runtime: reference counting, allocation, copies and strings, whoever asked for them):\n\n"
            text += "| scenario | all | row decoding | parameter encoding | libpq protocol | runtime | concurrency runtime | bookkeeping (pipeline, transaction, pool) |\n|---|---|---|---|---|---|---|---|\n"
            for row in breakdown {
                text += String(format: "| %@ | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", row.scenario, row.total, row.decode, row.encode, row.libpq,
                               row.runtime, row.concurrency, row.bookkeeping)
            }
        }
        text += budget
        if !readScale.isEmpty {
            text += "\nRead scale (`wrk -t2 -c32` through `poopypals serve --pool-size 16` on the local cluster of scripts/cluster.sh: a primary and its synchronous standby on this one machine; the standby's share from serve's /metrics):\n\n"
            text += "| setup | workload | req/s | p99 | non-2xx | reads | served by the read pool | vs primary only |\n|---|---|---|---|---|---|---|---|\n"
            for row in readScale {
                let alone = readScale.first { $0.setup == ReadScale.primaryOnly && $0.workload == row.workload }
                let versus = alone.map { String(format: "%.2f", row.requestsPerSecond / max(1, $0.requestsPerSecond)) } ?? "–"
                text += String(format: "| %@ | %@ | %.0f | %.2f ms | %d | %d | %.1f %% | %@ |\n", row.setup, row.workload, row.requestsPerSecond,
                               row.p99Milliseconds ?? 0, row.non2xx, row.reads, row.standbyShare * 100, versus)
            }
        }
        return text
    }

    func write(json path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: url)
    }

    /// Replaces what stands between `<!-- results -->` and `<!-- /results -->`.
    func replaceResults(in path: String) throws {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        guard let start = text.range(of: "<!-- results -->"), let end = text.range(of: "<!-- /results -->"), start.upperBound <= end.lowerBound
        else { throw BenchError("\(path) has no <!-- results --> … <!-- /results --> section") }
        try (String(text[..<start.upperBound]) + "\n" + markdown + "\n" + String(text[end.lowerBound...]))
            .write(toFile: path, atomically: true, encoding: .utf8)
    }
}
