import Foundation
import Synchronization

/// The `Date` header's value (`Thu, 26 Nov 2026 01:02:03 GMT`, RFC 9110's IMF-fixdate), made once a second and
/// shared by every response of that second.
final class HTTPDate: Sendable {
    private let cache = Mutex<(second: Int, text: String)>((-1, ""))

    /// The header for the current second.
    func now() -> String {
        var clock = timespec()
        clock_gettime(CLOCK_REALTIME, &clock)
        let second = Int(clock.tv_sec)
        if let text = cache.withLock({ $0.second == second ? $0.text : nil }) { return text }
        let text = Self.format(second)
        cache.withLock { $0 = (second, text) }
        return text
    }

    static func format(_ second: Int) -> String {
        var time = time_t(second)
        var fields = tm()
        gmtime_r(&time, &fields)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let weekday = days[Int(fields.tm_wday) % 7], month = months[Int(fields.tm_mon) % 12]
        return "\(weekday), \(two(fields.tm_mday)) \(month) \(fields.tm_year + 1900) \(two(fields.tm_hour)):\(two(fields.tm_min)):\(two(fields.tm_sec)) GMT"
    }
}
