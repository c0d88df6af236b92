import Foundation

/// The `Date` header's value (`Thu, 26 Nov 2026 01:02:03 GMT`, RFC 9110's IMF-fixdate), made once a second by each
/// connection's `ResponseEncoder` and kept there, on the connection's event loop: nothing is shared, so nothing is
/// locked. (One cache for the server behind a `Mutex`, a priority-inheriting futex on Linux, read by every request
/// from the pool's threads, was half of the server's `futex` calls under `wrk -c32`: 1.2 a request.)
struct HTTPDate {
    private var second = -1
    private var text = ""

    /// The header for the current second.
    mutating func now() -> String {
        var clock = timespec()
        clock_gettime(CLOCK_REALTIME, &clock)
        let second = Int(clock.tv_sec)
        if second != self.second {
            text = Self.format(second)
            self.second = second
        }
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
