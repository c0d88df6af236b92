import Testing
import Values

/// The one duration grammar of options and environment variables: a number and a unit, nothing else.
@Suite("DurationText")
struct DurationTextTests {
    @Test(arguments: [("500ms", Duration.milliseconds(500)), ("5s", .seconds(5)), ("1.5s", .milliseconds(1500)),
                      ("0.25s", .milliseconds(250)), ("2m", .seconds(120)), ("0s", .zero), ("1.001s", .milliseconds(1001)),
                      ("9999999m", .seconds(599_999_940)), ("0.5m", .seconds(30)), ("10h", .seconds(36_000)),
                      ("24h", .seconds(86_400)), ("1.5h", .seconds(5400)), ("7d", .seconds(604_800)),
                      ("9999999.999d", .milliseconds(863_999_999_913_600))])
    func readsANumberAndAUnit(text: String, expected: Duration) {
        #expect(DurationText.parse(text) == expected)
    }

    @Test(arguments: ["", "5", "500", "s", "ms", ".5s", "5.s", "1.5ms", "1.0001s", "-1s", "+1s", "1e3s", " 5s", "5s ", "5 s",
                      "10H", "1w", "5D", "12345678d", "5sec", "٣s", "１s", "12345678s", "0x10s", "inf", "nan", "5S", "5MS"])
    func refusesEverythingElse(text: String) {
        #expect(DurationText.parse(text) == nil)
    }
}
