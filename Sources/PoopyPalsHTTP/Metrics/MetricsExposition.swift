import Foundation
import Prometheus

/// What `/metrics` answers, in the text exposition format: the registry's families, with a `# HELP` added for the
/// ones the data layer makes through swift-metrics (whose factory cannot pass one), then the process's own metrics,
/// read from /proc at scrape time (Linux; elsewhere they are left out), and the scrape's own readings (pool,
/// archiving). The metrics test fails on a family without HELP, so a new swift-metrics name needs its line in `help`.
enum MetricsExposition {
    static let help: [String: String] = [
        "poopypals_db_retries_total": "Request transactions run again after a transient failure (serialization, deadlock, lost connection, stale statement, a failover).",
        "poopypals_db_reads_on_primary_total": "Reads meant for the read pool run on the primary instead: the standby was behind the request's Consistency-Token, or unreachable.",
        "poopypals_profile_conflicts_total": "Profile creations that met a concurrent insert (SQLSTATE 23505) and returned the existing row.",
        "poopypals_http_refusals_total": "Requests a limit refused, by code: rate_limited, device_busy, export_busy, quota_exceeded, busy.",
    ]

    /// A gauge read for one scrape, rendered into that scrape's answer alone.
    struct Gauge: Sendable {
        let name: String
        let help: String
        let value: Double
    }

    /// A sample's value as the text format spells it: `NaN`, `+Inf`, `-Inf` (Swift's own `nan`, `inf` are not
    /// the format's words, though lenient parsers take them).
    static func sample(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value < 0 ? "-Inf" : "+Inf" }
        return "\(value)"
    }

    static func render(_ registry: PrometheusCollectorRegistry, readings: [Gauge] = []) -> [UInt8] {
        var text = String(decoding: registry.emitToBuffer(), as: UTF8.self)
        var lines: [Substring] = []
        var previous: Substring = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("# TYPE "), let name = line.dropFirst(7).split(separator: " ").first,
               !previous.hasPrefix("# HELP \(name) "), let help = help[String(name)] {
                lines.append("# HELP \(name) \(help)")
            }
            lines.append(line)
            previous = line
        }
        text = lines.joined(separator: "\n")
        if !text.isEmpty, !text.hasSuffix("\n") { text += "\n" }
        for gauge in readings {
            text += "# HELP \(gauge.name) \(gauge.help)\n# TYPE \(gauge.name) gauge\n\(gauge.name) \(sample(gauge.value))\n"
        }
        text += processMetrics()
        return Array(text.utf8)
    }

    /// `process_*` as Prometheus's client libraries name them.
    static func processMetrics() -> String {
        #if os(Linux)
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return "" }
        // The fields after the command name, which may itself hold spaces: field 3 (state) is index 0.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        guard fields.count > 21, ticks > 0, let user = Double(fields[11]), let system = Double(fields[12]),
              let started = Double(fields[19]), let virtual = Double(fields[20]), let resident = Double(fields[21]) else { return "" }
        let bootTime = (try? String(contentsOfFile: "/proc/stat", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("btime ") }
            .flatMap { Double($0.dropFirst(6).trimmingCharacters(in: .whitespaces)) } ?? 0
        let openFDs = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
        var limit = rlimit()
        let maxFDs = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 ? Double(limit.rlim_cur) : 0
        func family(_ name: String, _ type: String, _ help: String, _ value: Double) -> String {
            "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(sample(value))\n"
        }
        return family("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.", (user + system) / ticks)
            + family("process_resident_memory_bytes", "gauge", "Resident memory size, in bytes.", resident * page)
            + family("process_virtual_memory_bytes", "gauge", "Virtual memory size, in bytes.", virtual)
            + family("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds.", bootTime + started / ticks)
            + family("process_open_fds", "gauge", "Open file descriptors.", Double(openFDs))
            + family("process_max_fds", "gauge", "Limit on open file descriptors.", maxFDs)
        #else
        return ""
        #endif
    }
}
