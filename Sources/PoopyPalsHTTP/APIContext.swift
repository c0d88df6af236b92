import Hummingbird
import NIOCore
import PoopyPalsData

/// Per-request state: the request id (echoed in `X-Request-ID` and every log line), the calling device resolved
/// once from `X-Device-ID` (`APIMiddleware`), and a 64 KiB body limit.
public struct APIContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var requestID = ""
    /// Set by `APIMiddleware` from `X-Device-ID`: the device, or why there is none.
    var resolvedDevice: Result<DeviceID, AuthenticationError> = .failure(.missingDeviceID)

    /// The request's connection, for its peer's address when a route asks (`remoteAddress`).
    private let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }

    /// The client's address as the socket gives it (a proxy's, behind one: `ClientNetwork`). Read only when asked:
    /// off the event loop NIO reads it under a lock, which every request would otherwise take.
    var remoteAddress: SocketAddress? { channel.remoteAddress }

    /// Bodies over 64 KiB are refused with 413.
    public var maxUploadSize: Int { Self.maxUploadSize }
    static let maxUploadSize = 64 * 1024

    /// The calling device.
    /// - Throws: `AuthenticationError` (401) when `X-Device-ID` is missing or not a device id.
    func device() throws(AuthenticationError) -> DeviceID {
        try resolvedDevice.get()
    }
}
