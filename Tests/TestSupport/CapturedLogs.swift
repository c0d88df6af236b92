import Logging

/// Every log line of the test process, at trace level, from every logger made after `install()`: the data
/// layer's as well as the HTTP layer's. For assertions about what is never logged.
public enum CapturedLogs {
    private static let lines = Locked<[String]>([])
    private static let installed: Void = {
        LoggingSystem.bootstrap { label in Handler(label: label) }
    }()

    /// Bootstraps the process's logging once (later calls do nothing).
    public static func install() { _ = installed }

    public static var all: [String] { lines.value }

    struct Handler: LogHandler {
        let label: String
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            let fields = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            CapturedLogs.lines.withLock { $0.append("\(event.level) \(label) \(event.message) \(fields)") }
        }
    }
}
