import Logging

/// Every log line of the test process, at trace level, from every logger made after `install()`: the data
/// layer's as well as the HTTP layer's. For assertions about what is never logged.
public enum CapturedLogs {
    private static let lines = Locked<[String]>([])
    private static let installed: Void = {
        LoggingSystem.bootstrap { label in LineCapturingHandler(label: label, lines: lines) }
    }()

    /// Bootstraps the process's logging once (later calls do nothing).
    public static func install() { _ = installed }

    public static var all: [String] { lines.value }
}

/// Keeps every log line (level, label, message and metadata) in `lines`.
public struct LineCapturingHandler: LogHandler {
    let label: String
    let lines: Locked<[String]>
    public var logLevel: Logger.Level = .trace
    public var metadata: Logger.Metadata = [:]

    public init(label: String, lines: Locked<[String]>) {
        self.label = label
        self.lines = lines
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        let fields = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        lines.withLock { $0.append("\(event.level) \(label) \(event.message) \(fields)") }
    }
}
