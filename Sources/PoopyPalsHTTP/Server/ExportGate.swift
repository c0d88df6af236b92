import Foundation
import PoopyPalsData

/// How many exports this process prepares and streams at once (`POOPYPALS_MAX_EXPORTS`), and one per device: each
/// holds a spool (memory, then a temporary file) until its client has read it, so a client that asks again and
/// again, or many that never read, must not grow the disk without bound. Beyond it: 429 `export_busy`, with
/// `Retry-After`.
final class ExportGate: @unchecked Sendable {
    private let lock = NSLock()
    private let limit: Int
    private var devices: Set<UUID> = []

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// True when `device` may export now (give it back with `leave`); false when it already exports or `limit`
    /// exports run.
    func enter(_ device: DeviceID) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard devices.count < limit, !devices.contains(device.key) else { return false }
        devices.insert(device.key)
        return true
    }

    func leave(_ device: DeviceID) {
        lock.lock()
        devices.remove(device.key)
        lock.unlock()
    }
}
