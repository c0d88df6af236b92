import HTTPTypes
@testable import PoopyPalsHTTP
import Testing

@Suite("Header lookups")
struct HeaderLookupTests {
    /// `value(of:)` answers what the subscript answers: absent, one field, several (joined with ", ", cookies
    /// with "; "), names in any case, empty values; on 5 000 random header lists.
    @Test func valueOfAnswersAsTheSubscriptDoes() {
        let names: [HTTPField.Name] = [.deviceID, .requestID, .consistencyToken, .contentType, .cookie, .accept,
                                       HTTPField.Name("x-DEVICE-id")!, HTTPField.Name("X-Request-Id")!]
        let values = ["", "a", "application/json", "00000000-0000-4000-8000-000000000001", " spaced ", "x, y", "k=v"]
        var generator = SystemRandomNumberGenerator()
        var several = 0
        for _ in 0..<5_000 {
            var fields = HTTPFields()
            for _ in 0..<Int.random(in: 0...6, using: &generator) {
                fields.append(HTTPField(name: names.randomElement(using: &generator) ?? .accept,
                                        value: values.randomElement(using: &generator) ?? ""))
            }
            for name in names {
                #expect(fields.value(of: name) == fields[name], "\(name) in \(fields)")
                if fields[fields: name].count > 1 { several += 1 }
            }
        }
        #expect(several > 1_000)
    }
}
