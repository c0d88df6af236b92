import Foundation

/// The system's random bytes, read 4 KiB at a time: `UUIDText.random()` made a request id with two `getrandom`
/// calls, two system calls a request (`strace -c` on the server under `wrk`), one per 256 ids now.
///
/// The bytes are the kernel's (`/dev/urandom`, kept open), each handed out once and then overwritten in the
/// batch; only the fetching is batched. A forked child would repeat its parent's unused bytes: this process never
/// forks (it spawns). Where `/dev/urandom` cannot be opened or read, `SystemRandomNumberGenerator` fills in.
final class RandomBytes: @unchecked Sendable {
    static let shared = RandomBytes()
    static let batch = 4096

    private let lock = NSLock()
    private var buffer = [UInt8](repeating: 0, count: RandomBytes.batch)
    private var used = RandomBytes.batch
    private let device = open("/dev/urandom", O_RDONLY | O_CLOEXEC)

    /// Fills `out` (at most `batch` bytes; more comes from the generator directly).
    func fill(_ out: UnsafeMutableRawBufferPointer) {
        guard out.count <= Self.batch, device >= 0 else { return Self.generate(into: out) }
        lock.lock()
        defer { lock.unlock() }
        if used + out.count > buffer.count {
            guard refill() else { return Self.generate(into: out) }
        }
        buffer.withUnsafeMutableBytes { batch in
            let taken = UnsafeMutableRawBufferPointer(rebasing: batch[used..<used + out.count])
            out.copyMemory(from: UnsafeRawBufferPointer(taken))
            taken.initializeMemory(as: UInt8.self, repeating: 0)
        }
        used += out.count
    }

    /// A whole batch from the device, or false (nothing taken from a partial one).
    private func refill() -> Bool {
        var filled = 0
        let complete = buffer.withUnsafeMutableBytes { batch -> Bool in
            guard let base = batch.baseAddress else { return false }
            while filled < batch.count {
                let count = read(device, base + filled, batch.count - filled)
                if count > 0 { filled += count } else if count < 0 && errno == EINTR { continue } else { return false }
            }
            return true
        }
        if complete { used = 0 }
        return complete
    }

    private static func generate(into out: UnsafeMutableRawBufferPointer) {
        var generator = SystemRandomNumberGenerator()
        var index = 0
        while index < out.count {
            var word = generator.next() as UInt64
            let count = min(8, out.count - index)
            withUnsafeBytes(of: &word) { UnsafeMutableRawBufferPointer(rebasing: out[index..<index + count]).copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            index += count
        }
    }
}
