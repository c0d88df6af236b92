import Foundation
import Synchronization

/// What another thread may know of, and do to, one connection's round trips: whether one is in flight and since
/// when, and abandoning it. libpq's calls block until the server answers; a hung server (its process stopped, its
/// TCP still up, so keepalives and `tcp_user_timeout` see nothing wrong) or a COMMIT waiting for a lost synchronous
/// standby (which `statement_timeout` does not bound) would hold the calling thread, and the request, forever.
/// `abandon()` shuts the socket down under libpq: the blocked read returns at once, the connection reports
/// `deadlineExceeded` and is never used again.
public final class RoundTripWatch: Sendable {
    /// Monotonic nanoseconds when the round trip in flight was sent; 0 when none is.
    private let sentAt = Atomic<Int64>(0)
    private let abandoned = Atomic<Bool>(false)
    /// The connection's socket, fixed once connected. Shut down, never closed, from here: the descriptor stays the
    /// connection's until `PQfinish`, which runs on the owner's thread after the borrower is done.
    let socket: Int32

    init(socket: Int32) { self.socket = socket }

    /// Nanoseconds of the monotonic clock (`CLOCK_MONOTONIC`): comparable across threads, cheap to read.
    public static func now() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    func started() { sentAt.store(Self.now(), ordering: .relaxed) }
    func finished() { sentAt.store(0, ordering: .relaxed) }

    /// When the round trip in flight was sent; nil when none is.
    public var inFlightSince: Int64? {
        let value = sentAt.load(ordering: .relaxed)
        return value == 0 ? nil : value
    }

    public var isAbandoned: Bool { abandoned.load(ordering: .acquiring) }

    /// From any thread: gives up on the round trip in flight. Safe while the owner blocks in libpq.
    public func abandon() {
        guard !abandoned.exchange(true, ordering: .acquiringAndReleasing), socket >= 0 else { return }
        _ = shutdown(socket, Int32(SHUT_RDWR))
    }
}
