import Hummingbird
import NIOCore
import PoopyPalsData

/// Names the network a client is on, for the registration limit (sql/0015) and the connection limit per address:
/// an IPv4 address whole (an IPv4-mapped IPv6 address counts as its IPv4 one), an IPv6 address by its /64 (what one
/// subscriber is given). For a request: the socket's peer, unless it is one of `trustedProxies`; then the last
/// address of `X-Forwarded-For` that is not a trusted proxy (what the nearest untrusted hop said). A header from
/// anyone else is ignored: a client cannot name itself another network.
struct ClientNetwork: Sendable {
    /// In `normalized` form.
    let trustedProxies: Set<String>
    /// The registration buckets' keys (sql/0037): the database holds these, never a network's text.
    let keys: NetworkKeys

    init(trustedProxies: [String] = [], keys: NetworkKeys = NetworkKeys(tokenSecret: "")) {
        self.trustedProxies = Set(trustedProxies.compactMap(Self.normalized))
        self.keys = keys
    }

    /// The registration buckets of a request's client, as keys: its network's (an IPv4 address, an IPv6 /64), and
    /// for IPv6 its /48's, which a registration also takes a token of (so that one allocation cannot register a
    /// burst from each of its 65 536 /64s).
    func bucketKeys(of request: Request, context: APIContext) -> (network: String, wide: String?)? {
        guard let network = name(of: request, context: context) else { return nil }
        return (keys.key(network), Self.wideNetwork(of: network).map(keys.key))
    }

    /// `v6:a:b:c::/48` for `v6:a:b:c:d::/64`; nil for an IPv4 network.
    static func wideNetwork(of network: String) -> String? {
        guard network.hasPrefix("v6:"), network.hasSuffix("::/64") else { return nil }
        let groups = network.dropFirst(3).dropLast(5).split(separator: ":", omittingEmptySubsequences: false)
        guard groups.count == 4 else { return nil }
        return "v6:" + groups.prefix(3).joined(separator: ":") + "::/48"
    }

    func name(of request: Request, context: APIContext) -> String? {
        guard let peer = context.remoteAddress else { return nil }
        guard isTrustedProxy(peer) else { return Self.network(of: peer) }
        let hops = request.headers[values: .init("X-Forwarded-For")!]
            .flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces) }
        for hop in hops.reversed() {
            guard let address = Self.address(hop) else { return Self.network(of: peer) }  // a malformed hop: stop there
            if !isTrustedProxy(address) { return Self.network(of: address) }
        }
        return Self.network(of: peer)
    }

    /// True when `address` is one of the proxies whose `X-Forwarded-For` is believed.
    func isTrustedProxy(_ address: SocketAddress) -> Bool {
        !trustedProxies.isEmpty && Self.normalized(address).map(trustedProxies.contains) == true
    }

    /// An IP address read from text (at most 64 characters), or nil.
    static func address(_ text: String) -> SocketAddress? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.count <= 64 else { return nil }
        return try? SocketAddress(ipAddress: trimmed, port: 0)
    }

    /// An address in one canonical text form (IPv4-mapped IPv6 as IPv4), or nil when it is not an IP address.
    static func normalized(_ text: String) -> String? { address(text).flatMap(normalized) }

    static func normalized(_ address: SocketAddress) -> String? {
        switch address {
        case .v4: return address.ipAddress
        case .v6(let v6): return mappedIPv4(v6) ?? address.ipAddress
        default: return nil
        }
    }

    /// `v4:a.b.c.d`, or `v6:` and the first four groups of the address (its /64).
    static func network(_ text: String) -> String? { address(text).flatMap(network(of:)) }

    static func network(of address: SocketAddress) -> String? {
        switch address {
        case .v4: return address.ipAddress.map { "v4:" + $0 }
        case .v6(let v6):
            if let v4 = mappedIPv4(v6) { return "v4:" + v4 }
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0.prefix(8)) }
            return "v6:" + stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
                .joined(separator: ":") + "::/64"
        default: return nil
        }
    }

    /// The dotted IPv4 address of an IPv4-mapped IPv6 one (`::ffff:a.b.c.d`), else nil.
    private static func mappedIPv4(_ v6: SocketAddress.IPv6Address) -> String? {
        let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
        guard bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff else { return nil }
        return bytes[12...].map(String.init).joined(separator: ".")
    }
}
