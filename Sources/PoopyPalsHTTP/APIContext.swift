import Hummingbird

/// Per-request state: the request id (echoed in `X-Request-ID` and every log line) and a 64 KiB body limit.
public struct APIContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var requestID = ""

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
    }

    /// Bodies over 64 KiB are refused with 413.
    public var maxUploadSize: Int { 64 * 1024 }
}
