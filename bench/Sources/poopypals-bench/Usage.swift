import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// CPU time and context switches from `getrusage`: of this process (all its threads: the load loop, the pool's
/// connection threads), or of its waited-for children (pgbench). Per request = the difference over a run / its
/// requests.
struct Usage {
    let cpuMicroseconds: Double
    let contextSwitches: Double

    static func ofThisProcess() -> Usage {
        var usage = rusage()
        getrusage(who(RUSAGE_SELF), &usage)
        return Usage(usage)
    }

    static func ofChildren() -> Usage {
        var usage = rusage()
        getrusage(who(RUSAGE_CHILDREN), &usage)
        return Usage(usage)
    }

    #if canImport(Glibc)
    /// Glibc imports the constants as an enum and the parameter as Int32.
    private static func who(_ value: __rusage_who) -> __rusage_who_t { __rusage_who_t(value.rawValue) }
    #else
    private static func who(_ value: Int32) -> Int32 { value }
    #endif

    private init(_ usage: rusage) {
        func micros(_ time: timeval) -> Double { Double(time.tv_sec) * 1e6 + Double(time.tv_usec) }
        cpuMicroseconds = micros(usage.ru_utime) + micros(usage.ru_stime)
        contextSwitches = Double(usage.ru_nvcsw + usage.ru_nivcsw)
    }

    /// (CPU µs, context switches) per operation between `self` and `later`.
    func perOperation(until later: Usage, operations: Int) -> (cpu: Double, switches: Double)? {
        guard operations > 0 else { return nil }
        return ((later.cpuMicroseconds - cpuMicroseconds) / Double(operations),
                (later.contextSwitches - contextSwitches) / Double(operations))
    }
}
