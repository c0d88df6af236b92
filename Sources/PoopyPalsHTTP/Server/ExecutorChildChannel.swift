import HummingbirdCore
import Logging
import NIOCore

/// Runs each HTTP connection's requests on the request pool's threads (`ConnectionPool.taskExecutor()`): the
/// handler and its database call then share one thread, and the only hand-offs left per request are NIO's
/// (the event loop reads the request and writes the response). Without it, every request went from the event
/// loop to the cooperative pool, to a connection thread, back to the cooperative pool and to the event loop.
struct ExecutorChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let executor: any TaskExecutor

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        base.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await withTaskExecutorPreference(executor) {
            await base.handle(value: value, logger: logger)
        }
    }
}
