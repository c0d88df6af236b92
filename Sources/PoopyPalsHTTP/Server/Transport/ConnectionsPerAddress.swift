import Foundation
import NIOCore

/// Open connections per client network (`ClientNetwork`: an IPv4 address, an IPv6 /64), at most `limit` each
/// (`POOPYPALS_MAX_CONNECTIONS_PER_ADDRESS`): one client must not hold the process's connections
/// (`POOPYPALS_MAX_CONNECTIONS`) for itself. A connection over the limit is closed at once, before anything is read.
/// Trusted proxies are not limited: every client behind them shares their address.
final class ConnectionsPerAddress: @unchecked Sendable {
    let limit: Int
    private let clientNetwork: ClientNetwork
    private let lock = NSLock()
    private var open: [String: Int] = [:]

    init(limit: Int, clientNetwork: ClientNetwork) {
        self.limit = max(1, limit)
        self.clientNetwork = clientNetwork
    }

    /// Counts `channel` against its network until it closes; false (count unchanged) when that is at its limit.
    func admit(_ channel: any Channel) -> Bool {
        guard let peer = channel.remoteAddress, !clientNetwork.isTrustedProxy(peer),
              let key = ClientNetwork.network(of: peer) else { return true }
        let admitted = lock.withLock { () -> Bool in
            let count = open[key, default: 0]
            guard count < limit else { return false }
            open[key] = count + 1
            return true
        }
        guard admitted else { return false }
        channel.closeFuture.whenComplete { [self] _ in
            lock.withLock {
                let left = open[key, default: 1] - 1
                open[key] = left > 0 ? left : nil
            }
        }
        return true
    }
}
