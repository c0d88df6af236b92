import Foundation
@testable import PoopyPalsHTTP
import Testing

@Suite("JSON content types")
struct ContentTypeTests {
    /// The general reading, as it was before the ASCII path: the first non-empty part before `;`, trimmed of
    /// Unicode's spaces and tabs, lower-cased.
    private static func reference(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let media = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        return media == "application/json" || (media.hasPrefix("application/") && media.hasSuffix("+json"))
    }

    @Test func theASCIIPathAnswersAsTheGeneralReadingDoes() {
        let leads = ["", ";", ";;", " ", "\t", " ;", "\r", "\u{0B}", "\u{00A0}", "\u{3000}"]
        let media = ["application/json", "APPLICATION/JSON", "Application/Json", "application/problem+json",
                     "Application/Vnd.Api+JSON", "application/jsonx", "application/json+", "text/json", "application/",
                     "+json", "application/+json", "application+json", "", "json", "applicätion/json",
                     "ＡＰＰＬＩＣＡＴＩＯＮ/json", "application /json", "application/ json", "\"application/json\""]
        let tails = ["", ";charset=utf-8", " ; charset=utf-8", "\t", " ", ";", "\u{00A0}", " x", ";application/json"]
        var compared = 0
        for lead in leads {
            for type in media {
                for tail in tails {
                    let value = lead + type + tail
                    #expect(JSONBody.isJSON(value) == Self.reference(value), "\(value.debugDescription)")
                    compared += 1
                }
            }
        }
        #expect(compared == leads.count * media.count * tails.count)
        #expect(JSONBody.isJSON(nil) == false)
    }

    @Test func randomASCIIValuesAnswerAsTheGeneralReadingDoes() {
        let alphabet = Array("aAjJsSoOnN+/; \t\r,=-pPlLiIcCtT".utf8)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<3000 {
            let length = Int.random(in: 0...24, using: &generator)
            var bytes = (0..<length).map { _ in alphabet.randomElement(using: &generator)! }
            if Bool.random(using: &generator) { bytes = Array("application/".utf8) + bytes }
            if Bool.random(using: &generator) { bytes += Array("+JSON".utf8) }
            let value = String(decoding: bytes, as: UTF8.self)
            #expect(JSONBody.isJSON(value) == Self.reference(value), "\(value.debugDescription)")
        }
    }

    @Test func theUsualValuesAreAcceptedAndOthersRefused() {
        for value in ["application/json", "application/json; charset=utf-8", "Application/JSON", " application/merge-patch+json "] {
            #expect(JSONBody.isJSON(value), "\(value)")
        }
        for value in ["text/plain", "application/x-www-form-urlencoded", "", "application/jsonp", "multipart/form-data; boundary=json"] {
            #expect(!JSONBody.isJSON(value), "\(value)")
        }
    }
}
