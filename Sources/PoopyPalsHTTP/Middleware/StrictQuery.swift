import HTTPTypes
import Hummingbird
import HummingbirdCore

/// Input the API refuses before any handler runs: a query parameter given more than once (which of two
/// `limit`s would a proxy and we each pick?), and one the route does not take (as unknown body fields are).
enum StrictQuery {
    /// The query parameters of each path (`openapi.yaml`); every other path takes none.
    static let parameters: [String: Set<Substring>] = ["/v1/logs": ["limit", "before"], "/v1/sync": ["cursor", "limit"]]
    /// The same names, for the check on the query's bytes (`acceptsAll`).
    static let parameterNames: [String: [String]] = parameters.mapValues { $0.map(String.init) }

    /// Longer request targets are 414 (the parser refuses beyond `ParserErrors.maxFieldSize`, 431).
    static let maxTargetLength = 8 * 1024

    /// - Throws: `APIError` 414 for a target over `maxTargetLength`, 400 for a repeated or unknown parameter.
    static func check(_ request: Request) throws {
        guard request.uri.description.utf8.count <= maxTargetLength else {
            throw APIError(.init(code: 414), "uri_too_long", "the request target is longer than \(maxTargetLength) bytes")
        }
        // Most requests pass, decided on the query's bytes: Hummingbird's `queryParameters` makes a dictionary of
        // every parameter, percent-decoding values (3 k instructions for `?limit=20`). A refusal is left to the
        // general reading below, which words the error.
        guard let query = request.uri.query else { return }
        if acceptsAll(query, allowed: parameterNames[request.uri.path] ?? []) { return }
        let allowed = parameters[request.uri.path] ?? []
        var seen = Set<Substring>()
        for (name, _) in request.uri.queryParameters {
            guard seen.insert(name).inserted else {
                throw APIError(.badRequest, "invalid_request", "query parameter \(quoted(name)) is given more than once")
            }
            guard allowed.contains(name) else {
                throw APIError(.badRequest, "invalid_request", "query parameter \(quoted(name)) is not known here")
            }
        }
    }

    /// True when every parameter of `query` is named in `allowed` and none comes twice, read as Hummingbird's
    /// `URI.queryParameters` reads a query (`forEachParameter`). Names are compared byte for byte (ours are
    /// lowercase ASCII: no other bytes are canonically equal to them).
    static func acceptsAll(_ query: String, allowed: [String]) -> Bool {
        guard allowed.count <= 64 else { return false }
        var query = query
        var seen: UInt64 = 0
        return query.withUTF8 { bytes in
            forEachParameter(in: bytes) { name, _ in
                guard let index = allowed.firstIndex(where: { $0.utf8.elementsEqual(name) }) else { return false }
                let bit: UInt64 = 1 << UInt64(index)
                guard seen & bit == 0 else { return false }
                seen |= bit
                return true
            }
        }
    }

    /// The value of the parameter `name`, as `uri.queryParameters.get(name)` gives it, read on the
    /// query's bytes when the value has nothing to decode (ASCII, no `%` or `+`). For a query `check` passed:
    /// each name at most once.
    static func value(_ name: String, in uri: URI) -> String? {
        guard var query = uri.query else { return nil }
        enum Found { case absent, plain(String), decode }
        var found = Found.absent
        _ = query.withUTF8 { bytes in
            forEachParameter(in: bytes) { parameter, value in
                guard name.utf8.elementsEqual(parameter) else { return true }
                let plain = value.allSatisfy { $0 < 0x80 && $0 != UInt8(ascii: "%") && $0 != UInt8(ascii: "+") }
                found = plain ? .plain(String(decoding: value, as: UTF8.self)) : .decode
                return false
            }
        }
        switch found {
        case .absent: return nil
        case .plain(let value): return value
        case .decode: return uri.queryParameters.get(name)
        }
    }

    /// Calls `body` with each parameter's name and value bytes, split as Hummingbird's `URI.queryParameters`
    /// splits a query: at every `&` (an empty part between two is a parameter named `""`, a trailing `&` adds
    /// none), each name up to its part's first `=` (none: the part is the name, the value empty), nothing
    /// percent-decoded. Stops when `body` answers false, and answers false then.
    private static func forEachParameter(
        in bytes: UnsafeBufferPointer<UInt8>,
        _ body: (_ name: UnsafeBufferPointer<UInt8>, _ value: UnsafeBufferPointer<UInt8>) -> Bool
    ) -> Bool {
        var start = 0
        while start < bytes.count {
            var end = start
            while end < bytes.count, bytes[end] != UInt8(ascii: "&") { end += 1 }
            var nameEnd = start
            while nameEnd < end, bytes[nameEnd] != UInt8(ascii: "=") { nameEnd += 1 }
            let valueStart = Swift.min(nameEnd + 1, end)
            guard body(UnsafeBufferPointer(rebasing: bytes[start..<nameEnd]), UnsafeBufferPointer(rebasing: bytes[valueStart..<end]))
            else { return false }
            start = end + 1
        }
        return true
    }

    /// A client-sent name in a message: at most 40 characters of letters, digits and `_-.`.
    static func quoted(_ name: some StringProtocol) -> String {
        let safe = String(name.prefix(40).filter { $0.isASCII && ($0.isLetter || $0.isNumber || "_-.".contains($0)) })
        return "'\(safe)'"
    }
}
