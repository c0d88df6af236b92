import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// Answers one request off the event loop: a task that prefers the request pool's threads (the handler and its
/// database call then share one thread) runs the router, then writes the response through `ResponseStream`.
struct RequestRunner: Sendable {
    let responder: RouterResponder<APIContext>
    let executor: any TaskExecutor
    let logger: Logger

    /// Starts answering `request`; `connection` is given the response on its event loop.
    func start(_ request: Request, channel: any Channel, connection: NIOLoopBound<APIConnection>) {
        Task(executorPreference: executor) {
            let context = APIContext(source: .init(channel: channel, logger: logger))
            var response: Response
            do {
                response = try await responder.respond(to: request, context: context)
            } catch {
                // APIMiddleware answers every error; this is Hummingbird's own last resort, kept.
                logger.debug("unanswered error", metadata: ["error.type": "\(type(of: error))"])
                response = Response(status: .internalServerError)
            }
            let stream = ResponseStream(head: response.head, channel: channel, connection: connection)
            do {
                try await response.body.write(ResponseStream.Writer(stream: stream))
                stream.finish(nil)  // nothing when the body finished itself
            } catch {
                // A streamed body that failed part way (an export): the client must not take it for complete.
                logger.debug("response body failed", metadata: ["error.type": "\(type(of: error))"])
                stream.abort()
            }
        }
    }
}
