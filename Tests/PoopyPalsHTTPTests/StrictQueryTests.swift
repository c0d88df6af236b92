import Hummingbird
import HummingbirdCore
@testable import PoopyPalsHTTP
import Testing

@Suite("Strict query parameters, read on the query's bytes")
struct StrictQueryTests {
    /// The general reading (Hummingbird's `queryParameters`): every name allowed, none twice.
    private static func reference(_ uri: URI, allowed: Set<Substring>) -> Bool {
        var seen = Set<Substring>()
        for (name, _) in uri.queryParameters {
            guard seen.insert(name).inserted, allowed.contains(name) else { return false }
        }
        return true
    }

    /// Pieces of queries: our names and near misses, separators, escapes, non-ASCII and canonically equal forms.
    static let pieces = ["limit", "before", "cursor", "li", "limits", "LIMIT", "x", "", "&", "&", "=", "=", "20", "%6C", "%20",
                         "%", "+", "é", "e\u{301}", "\u{212A}", "%FF", "?", "#", "a=b=c"]

    /// 20 000 random queries, and every one of two pieces: the byte reading accepts exactly what the general
    /// reading accepts, and reads each value as it does.
    @Test func theByteReadingAgreesWithHummingbirds() throws {
        var generator = SystemRandomNumberGenerator()
        var queries = Self.pieces.flatMap { first in Self.pieces.map { first + $0 } }
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...8, using: &generator)
            queries.append((0..<count).map { _ in Self.pieces.randomElement(using: &generator) ?? "" }.joined())
        }
        var accepted = 0
        for (path, allowed) in StrictQuery.parameters.map({ ($0.key, $0.value) }) + [("/healthz", [])] {
            let names = StrictQuery.parameterNames[path] ?? []
            for query in queries {
                let uri = URI(path + "?" + query)
                let expected = Self.reference(uri, allowed: allowed)
                let actual = StrictQuery.acceptsAll(uri.query ?? "", allowed: names)
                #expect(actual == expected, "\(path)?\(query.debugDescription)")
                guard expected else { continue }
                accepted += 1
                for name in ["limit", "before", "cursor", "x", ""] {
                    #expect(StrictQuery.value(name, in: uri) == uri.queryParameters.get(name), "\(name) in \(query.debugDescription)")
                }
            }
        }
        // Enough of both answers to mean something.
        #expect(accepted > 500)
        #expect(accepted < queries.count * 3 - 500)
    }

    @Test func aQueryWithNothingInItIsAccepted() {
        #expect(StrictQuery.acceptsAll("", allowed: []))
        #expect(StrictQuery.acceptsAll("&", allowed: []) == Self.reference(URI("/x?&"), allowed: []))
        #expect(!StrictQuery.acceptsAll("&&", allowed: ["limit"]))
        #expect(StrictQuery.value("limit", in: URI("/v1/logs")) == nil)
    }

    /// A value with something to decode is read by the general reading: the same value either way.
    @Test func encodedValuesAreDecodedAsHummingbirdDecodesThem() {
        for query in ["limit=%32%30", "before=a%2Bb", "before=a+b", "before=%E2%82%AC", "before=%zz", "before=\u{20AC}"] {
            let uri = URI("/v1/logs?" + query)
            let name = String(query.prefix { $0 != "=" })
            #expect(StrictQuery.value(name, in: uri) == uri.queryParameters.get(name), "\(query)")
        }
    }
}
