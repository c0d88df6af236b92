import Foundation
import Synchronization

/// The WAL position a write's commit reached, as the `Consistency-Token` header carries it: a read that sends it
/// back is served by a standby only if the standby has replayed at least that far (read-your-writes), else by the
/// primary. Opaque to clients: `c1.` and the LSN as 16 lowercase hex digits (a form openapi.yaml states as a
/// pattern, so that every value a client can build from the spec is one the service reads).
///
/// A token says where in the WAL, never whose data: a tampered one can only send a read to the primary (or make it
/// wait for nothing), never show another device's rows, which row-level security keeps out whatever the token.
public struct ConsistencyToken: Sendable, Equatable, Comparable {
    /// The LSN as a 64-bit number (PostgreSQL's `pg_lsn`).
    public let position: UInt64

    public init(position: UInt64) { self.position = position }

    /// From PostgreSQL's text form `XXXXXXXX/XXXXXXXX` (1–8 hex digits each side); nil otherwise.
    public init?(lsn text: some StringProtocol) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ (1...8).contains($0.count) && $0.allSatisfy(\.isHexDigit) && $0.allSatisfy(\.isASCII) }),
              let high = UInt64(parts[0], radix: 16), let low = UInt64(parts[1], radix: 16)
        else { return nil }
        position = high << 32 | low
    }

    /// PostgreSQL's text form, as `pg_lsn` reads it.
    public var lsn: String { String(position >> 32, radix: 16, uppercase: true) + "/" + String(position & 0xFFFF_FFFF, radix: 16, uppercase: true) }

    /// The header value.
    public var encoded: String {
        let hex = String(position, radix: 16)
        return "c1." + String(repeating: "0", count: 16 - hex.utf8.count) + hex
    }

    /// - Throws: `InvalidField("Consistency-Token", …)` for anything but `c1.` and 16 lowercase hex digits.
    public init(encoded: String) throws(InvalidField) {
        let utf8 = Array(encoded.utf8)
        guard utf8.count == 19, utf8.starts(with: Array("c1.".utf8)),
              utf8[3...].allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }),
              let position = UInt64(String(decoding: utf8[3...], as: UTF8.self), radix: 16)
        else { throw InvalidField("Consistency-Token", "is not a token this service returned") }
        self.position = position
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.position < rhs.position }
}

/// Collects the commit positions of one request's writes (the highest wins), for its `Consistency-Token`.
public final class CommitRecorder: Sendable {
    private let latest = Mutex<ConsistencyToken?>(nil)

    public init() {}

    public var token: ConsistencyToken? { latest.withLock { $0 } }

    func record(_ token: ConsistencyToken) {
        latest.withLock { current in
            if current.map({ $0 < token }) ?? true { current = token }
        }
    }
}
