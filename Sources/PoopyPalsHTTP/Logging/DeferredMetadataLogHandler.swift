import Logging

/// `StreamLogHandler`'s lines, with its handler metadata rendered only when a line is written. `StreamLogHandler`
/// renders its metadata each time a value is set, and Hummingbird sets one on every request (`hb.request.id`):
/// 7.5 k instructions of a `POST /v1/logs`, for lines that, at the default level, are mostly never written.
///
/// The metadata is kept here and handed to the stream handler with each line, merged as it merges it: handler
/// metadata, then the provider's, then the line's own (each later one wins a key).
public struct DeferredMetadataLogHandler: LogHandler {
    private var stream: StreamLogHandler
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?

    /// Writes through `stream`, whose own metadata and provider are then this handler's.
    public init(_ stream: StreamLogHandler) {
        var stream = stream
        metadata = stream.metadata
        metadataProvider = stream.metadataProvider
        stream.metadata = [:]
        stream.metadataProvider = nil
        self.stream = stream
    }

    public var logLevel: Logger.Level {
        get { stream.logLevel }
        set { stream.logLevel = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty {
            merged.merge(provided) { _, provided in provided }
        }
        if let explicit = event.metadata, !explicit.isEmpty {
            merged.merge(explicit) { _, explicit in explicit }
        }
        var event = event
        event.metadata = merged
        stream.log(event: event)
    }
}
