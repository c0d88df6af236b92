import Foundation

/// State behind a plain pthread mutex (`NSLock`). The pool's state used `Synchronization.Mutex`, which on Linux
/// spins before it sleeps: with more threads than cores (a pool of 8 on 2 cores) its spinning was 5.6 % of the
/// client's CPU in `make bench`'s profile, CPU taken from the server on the same machine.
final class LockedState<State>: @unchecked Sendable {
    private let lock = NSLock()
    private var state: State

    init(_ state: State) { self.state = state }

    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}
