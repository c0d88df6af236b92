import Foundation

/// Issue 59: instructions per request held to a committed baseline (`bench/instruction-budget.json`). Callgrind
/// counts instructions, not time, so a figure moves only when the code or its inputs do: a change that makes a
/// request more than `tolerance` heavier is named by `make bench`, which then exits non-zero (after writing its
/// results). A change meant to move a figure says so in its note and records the new baseline with
/// `make bench BENCH_ARGS=--update-budget`.
enum InstructionBudget {
    static let tolerance = 0.05

    /// What is held: our server's instructions per request by route, and the data layer's by scenario.
    struct Baseline: Codable, Equatable {
        var server: [String: Int]
        var client: [String: Int]
        var measured: String
    }

    struct Line {
        let what: String
        let measured: Double
        let baseline: Int?
        var change: Double? { baseline.map { measured / Double(max(1, $0)) - 1 } }
        var over: Bool { (change ?? 0) > tolerance }
        var text: String {
            guard let baseline, let change else {
                return String(format: "%@: %.0f per request, no baseline (record one: --update-budget)", what, measured)
            }
            let verdict = over ? String(format: "OVER BUDGET: more than %.0f %% over the baseline", tolerance * 100)
                : change < -tolerance ? "under the baseline by more than 5 %: record the new one (--update-budget)"
                : "within 5 %"
            return String(format: "%@: %.0f per request against %d (%+.1f %%), %@", what, measured, baseline, change * 100, verdict)
        }
    }

    static func load(_ path: String) throws -> Baseline? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        return try JSONDecoder().decode(Baseline.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    }

    static func measured(instructions: [InstructionRow], breakdown: [BreakdownRow], date: String) -> Baseline {
        var server: [String: Int] = [:]
        for row in instructions where row.server == "poopypals" { server[row.route] = Int(row.instructionsPerRequest.rounded()) }
        var client: [String: Int] = [:]
        for row in breakdown { client[row.scenario] = Int(row.total.rounded()) }
        return Baseline(server: server, client: client, measured: date)
    }

    static func lines(instructions: [InstructionRow], breakdown: [BreakdownRow], baseline: Baseline?) -> [Line] {
        instructions.filter { $0.server == "poopypals" }.map {
            Line(what: "server instructions, \($0.route)", measured: $0.instructionsPerRequest, baseline: baseline?.server[$0.route])
        } + breakdown.map {
            Line(what: "data-layer client instructions, \($0.scenario)", measured: $0.total, baseline: baseline?.client[$0.scenario])
        }
    }

    static func write(_ baseline: Baseline, to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try (encoder.encode(baseline) + Data("\n".utf8)).write(to: URL(fileURLWithPath: path))
    }

    static func markdown(_ lines: [Line], path: String) -> String {
        guard !lines.isEmpty else { return "" }
        var text = "\nInstruction budget (issue 59: each figure above against `\(path)`; more than 5 % over fails `make bench`):\n\n"
        text += lines.map { "- " + $0.text }.joined(separator: "\n") + "\n"
        return text
    }
}
