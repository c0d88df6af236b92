import Foundation

/// The `Date` header's value (`Thu, 26 Nov 2026 01:02:03 GMT`, RFC 9110's IMF-fixdate), made once a second on
/// each thread that asks and kept in a thread-specific slot: nothing is shared, so nothing is locked. One cache
/// behind a `Mutex` (a priority-inheriting futex on Linux), read by every request on the pool's threads, was half
/// of the server's `futex` calls under `wrk -c32` (`perf record -e syscalls:sys_enter_futex`): 1.2 a request.
enum HTTPDate {
    private final class Cache {
        var second = -1
        var text = ""
    }

    /// Nil if the process is out of keys: the header is then formatted for every response.
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        let created = pthread_key_create(&key) { slot in
            // The thread ends: its cache goes with it.
            if let slot { Unmanaged<Cache>.fromOpaque(slot).release() }
        }
        return created == 0 ? key : nil
    }()

    /// The header for the current second.
    static func now() -> String {
        var clock = timespec()
        clock_gettime(CLOCK_REALTIME, &clock)
        let second = Int(clock.tv_sec)
        guard let key else { return format(second) }
        let cache: Cache
        if let slot = pthread_getspecific(key) {
            cache = Unmanaged<Cache>.fromOpaque(slot).takeUnretainedValue()
        } else {
            cache = Cache()
            guard pthread_setspecific(key, Unmanaged.passRetained(cache).toOpaque()) == 0 else {
                Unmanaged.passUnretained(cache).release()
                return format(second)
            }
        }
        if cache.second != second {
            cache.text = format(second)
            cache.second = second
        }
        return cache.text
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
