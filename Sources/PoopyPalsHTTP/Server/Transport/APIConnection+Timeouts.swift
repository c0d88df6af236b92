import NIOCore

/// The connection's two clocks. The request timeout bounds how long a request may take to arrive: its headers,
/// counted from the connection's start or the previous response's end, then its body, each within the timeout
/// (the idle timeout alone lets a client that sends one byte now and then hold a connection for ever). The idle
/// timeout closes a connection nothing has happened on for that long, unless a request is being answered.
///
/// Each is at most one scheduled task, firing at or before its deadline: arming moves the deadline and leaves
/// the task in place (it schedules itself again for a later deadline when it fires). A timer scheduled and
/// cancelled twice per request cost 5 % of a `/healthz` request's instructions.
extension APIConnection {
    func becameActive(context: ChannelHandlerContext) {
        arm(.headers, context: context)
        lastActive = .now()
        if let idleTimeout { scheduleIdle(at: lastActive + idleTimeout, context: context) }
    }

    /// Every request read has been answered: the next one's headers are timed from now, and so is idleness.
    /// (`watch` was reset when the last request was handed over: bytes of the next one may have come since.)
    func requestsAnswered(context: ChannelHandlerContext) {
        if !readingBody { arm(.headers, context: context) }
        if let idleTimeout {
            lastActive = .now()
            scheduleIdle(at: lastActive + idleTimeout, context: context)
        }
    }

    func arm(_ phase: Phase, context: ChannelHandlerContext) {
        armed = phase
        deadline = .now() + requestTimeout
        // A scheduled task fires no later than this deadline (the timeout is constant, the clock monotonic).
        if requestTimer == nil { scheduleRequestTimer(context: context) }
    }

    func stopTimers() {
        requestTimer?.cancel()
        requestTimer = nil
        armed = nil
        idleTimer?.cancel()
        idleTimer = nil
    }

    private func scheduleRequestTimer(context: ChannelHandlerContext) {
        let loop = context.eventLoop.assumeIsolated()
        requestTimer = loop.scheduleTask(deadline: deadline) { [self] in requestTimerFired(context: context) }
    }

    private func requestTimerFired(context: ChannelHandlerContext) {
        requestTimer = nil
        guard let phase = armed else { return }
        guard deadline <= .now() else { return scheduleRequestTimer(context: context) }
        armed = nil
        let seconds = requestTimeout.nanoseconds / 1_000_000_000
        switch phase {
        case .headers:
            guard open == 0 else { return }
            if watch.arrived {
                refuse(APIError(.init(code: 408), "request_timeout", "the request's headers did not arrive within \(seconds) s"), context: context)
            } else {
                closeNow(context: context)  // an idle keep-alive connection: nothing to answer
            }
        case .body:
            guard readingBody else { return }
            if responseStarted {
                closeNow(context: context)
            } else {
                refuse(APIError(.init(code: 408), "request_timeout", "the request's body did not arrive within \(seconds) s"), context: context)
            }
        }
    }

    private func scheduleIdle(at deadline: NIODeadline, context: ChannelHandlerContext) {
        guard idleTimer == nil else { return }
        let loop = context.eventLoop.assumeIsolated()
        idleTimer = loop.scheduleTask(deadline: deadline) { [self] in idleTimerFired(context: context) }
    }

    private func idleTimerFired(context: ChannelHandlerContext) {
        idleTimer = nil
        guard let idleTimeout, !closing else { return }
        // A request read whole and being answered: the response's end schedules the timer again.
        if !readingBody && open > 0 { return }
        if NIODeadline.now() >= lastActive + idleTimeout {
            closeNow(context: context)
        } else {
            scheduleIdle(at: lastActive + idleTimeout, context: context)
        }
    }
}
