import Foundation
import Logging
@testable import PoopyPalsHTTP
import Testing

@Suite("Log lines with deferred metadata")
struct LogHandlerTests {
    /// A stream that keeps what is written.
    final class Lines: TextOutputStream, @unchecked Sendable {
        private let lock = NSLock()
        private var lines: [String] = []
        func write(_ string: String) { lock.withLock { lines.append(string) } }
        var all: [String] { lock.withLock { lines } }
    }

    struct Failure: Error, CustomStringConvertible { var description: String { "it failed" } }

    /// The same lines as `StreamLogHandler` writes, whatever the handler, provider and line each hold (keys in
    /// common included), at every level against the handler's; the timestamp aside (it may tick between the two).
    @Test func linesAreStreamLogHandlersLines() {
        let handlerSets: [Logger.Metadata] = [[:], ["hb.request.id": "7"], ["a": "1", "shared": "handler"]]
        let providerSets: [Logger.Metadata] = [[:], ["request_id": "r-1"], ["shared": "provider", "b": ["x", "y"]]]
        let lineSets: [Logger.Metadata?] = [nil, [:], ["route": "/v1/logs"], ["shared": "line", "n": ["k": "v"]]]
        var compared = 0
        for handlerSet in handlerSets {
            for providerSet in providerSets {
                let provider = providerSet.isEmpty ? nil : Logger.MetadataProvider { providerSet }
                for lineSet in lineSets {
                    for error in [nil, Failure()] as [Failure?] {
                        for level in [Logger.Level.debug, .info, .error] {
                            let (expected, actual) = (Lines(), Lines())
                            var reference = Logger(label: "poopypals.test") { label in
                                StreamLogHandler(label: label, stream: expected, metadataProvider: provider)
                            }
                            var deferred = Logger(label: "poopypals.test") { label in
                                DeferredMetadataLogHandler(StreamLogHandler(label: label, stream: actual, metadataProvider: provider))
                            }
                            for (key, value) in handlerSet {
                                reference[metadataKey: key] = value
                                deferred[metadataKey: key] = value
                            }
                            for logger in [reference, deferred] {
                                if let error {
                                    logger.log(level: level, "request", error: error, metadata: lineSet)
                                } else {
                                    logger.log(level: level, "request", metadata: lineSet)
                                }
                            }
                            let strip = { (line: String) in line.drop { $0 != " " } }
                            #expect(expected.all.map(strip) == actual.all.map(strip), "\(handlerSet) \(providerSet) \(String(describing: lineSet))")
                            #expect(expected.all.count == (level >= .info ? 1 : 0))
                            compared += 1
                        }
                    }
                }
            }
        }
        #expect(compared == 216)
    }

    /// Setting metadata renders nothing: what a line shows is the metadata when it is written.
    @Test func metadataSetAfterwardsIsWhatALineShows() {
        let lines = Lines()
        var logger = Logger(label: "x") { DeferredMetadataLogHandler(StreamLogHandler(label: $0, stream: lines, metadataProvider: nil)) }
        logger[metadataKey: "a"] = "1"
        logger[metadataKey: "a"] = "2"
        logger.info("one")
        logger[metadataKey: "a"] = nil
        logger.info("two")
        #expect(lines.all.count == 2)
        #expect(lines.all.first?.hasSuffix(" info x: a=2 [PoopyPalsHTTPTests] one\n") == true, "\(lines.all)")
        #expect(lines.all.last?.hasSuffix(" info x: [PoopyPalsHTTPTests] two\n") == true, "\(lines.all)")
    }
}
