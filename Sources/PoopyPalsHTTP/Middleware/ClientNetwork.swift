import Hummingbird
import NIOCore

/// Names the network a request comes from, for the registration limit (sql/0015): an IPv4 address whole, an IPv6
/// address by its /64 (what one subscriber is given). The socket's peer, unless it is one of `trustedProxies`: then
/// the last address of `X-Forwarded-For` that is not a trusted proxy (what the nearest untrusted hop said). A header
/// from anyone else is ignored: a client cannot name itself another network.
struct ClientNetwork: Sendable {
    let trustedProxies: Set<String>

    init(trustedProxies: [String] = []) {
        self.trustedProxies = Set(trustedProxies.compactMap(Self.normalized))
    }

    func name(of request: Request, context: APIContext) -> String? {
        guard let peer = context.remoteAddress?.ipAddress.flatMap(Self.normalized) else { return nil }
        guard trustedProxies.contains(peer) else { return Self.network(peer) }
        let hops = request.headers[values: .init("X-Forwarded-For")!]
            .flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces) }
        for hop in hops.reversed() {
            guard let address = Self.normalized(hop) else { return Self.network(peer) }  // a malformed hop: stop there
            if !trustedProxies.contains(address) { return Self.network(address) }
        }
        return Self.network(peer)
    }

    /// An address in one canonical text form (IPv4-mapped IPv6 as IPv4), or nil when it is not an IP address.
    static func normalized(_ text: String) -> String? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.count <= 64, let address = try? SocketAddress(ipAddress: trimmed, port: 0) else { return nil }
        switch address {
        case .v4: return address.ipAddress
        case .v6:
            guard let ip = address.ipAddress else { return nil }
            if ip.lowercased().hasPrefix("::ffff:"), ip.contains(".") { return String(ip.dropFirst(7)) }
            return ip
        default: return nil
        }
    }

    /// `v4:a.b.c.d`, or `v6:` and the first four groups of the address (its /64).
    static func network(_ address: String) -> String? {
        guard let parsed = try? SocketAddress(ipAddress: address, port: 0) else { return nil }
        switch parsed {
        case .v4: return "v4:" + address
        case .v6(let v6):
            var raw = v6.address.sin6_addr
            let bytes = withUnsafeBytes(of: &raw) { Array($0.prefix(8)) }
            return "v6:" + stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
                .joined(separator: ":") + "::/64"
        default: return nil
        }
    }
}
