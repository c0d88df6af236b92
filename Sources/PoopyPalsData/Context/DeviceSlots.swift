import Foundation
import Synchronization

/// At most `perDevice` requests of one device hold a database connection at once; the others wait here, holding
/// none, for `wait` at most, and then fail with `DeviceBusy` (429 `device_busy`). A device's writes serialize on
/// its row anyway (the change counter): 16 concurrent 500-operation pushes to one device each waited for that lock
/// on a pooled connection, and everyone else's requests queued behind them (median 2 s).
///
/// Per process: with N instances a device holds at most N × `perDevice` connections of the database's.
public final class DeviceSlots: Sendable {
    public let perDevice: Int
    public let wait: Duration

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var held: [UUID: Int] = [:]
        var waiting: [UUID: [Waiter]] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    public init(perDevice: Int = 2, wait: Duration = .seconds(3)) {
        self.perDevice = max(1, perDevice)
        self.wait = wait
    }

    /// Runs `body` holding one of `key`'s slots.
    /// - Throws: `DeviceBusy` when no slot came free within `wait`; what `body` throws.
    public func withSlot<T: Sendable>(_ key: UUID, _ body: () async throws -> T) async throws -> T {
        try await acquire(key)
        defer { release(key) }
        return try await body()
    }

    private func acquire(_ key: UUID) async throws {
        let perDevice = perDevice
        // One hash of the key: the count read and raised in place (a key already full is left as it is).
        let granted = state.withLock { state -> Bool in Self.take(&state.held[key, default: 0], upTo: perDevice) }
        if granted { return }
        let timer = TimerBox()
        defer { timer.take()?.cancel() }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let id = state.withLock { state -> UInt64? in
                if state.held[key, default: 0] < perDevice {
                    state.held[key, default: 0] += 1
                    return nil
                }
                state.nextID += 1
                state.waiting[key, default: []].append(Waiter(id: state.nextID, continuation: continuation))
                return state.nextID
            }
            guard let id else { return continuation.resume() }
            // Started once the waiter is in the queue: it can only find it there or already served.
            let wait = wait
            timer.set(Task { [weak self] in
                try? await Task.sleep(for: wait)
                guard !Task.isCancelled else { return }
                self?.expire(key, id)
            })
        }
    }

    private static func take(_ held: inout Int, upTo limit: Int) -> Bool {
        guard held < limit else { return false }
        held += 1
        return true
    }

    private func expire(_ key: UUID, _ id: UInt64) {
        let expired = state.withLock { state -> Waiter? in
            guard var queue = state.waiting[key], let index = queue.firstIndex(where: { $0.id == id }) else { return nil }
            let waiter = queue.remove(at: index)
            state.waiting[key] = queue.isEmpty ? nil : queue
            return waiter
        }
        expired?.continuation.resume(throwing: DeviceBusy())
    }

    private func release(_ key: UUID) {
        let next = state.withLock { state -> Waiter? in
            if !state.waiting.isEmpty, var queue = state.waiting[key], !queue.isEmpty {
                let first = queue.removeFirst()
                state.waiting[key] = queue.isEmpty ? nil : queue
                return first  // the slot passes to it: `held` stays
            }
            // One hash of the key (no one waits nearly always, and then the waiting list is not looked up at all).
            if let index = state.held.index(forKey: key) {
                if state.held.values[index] > 1 { state.held.values[index] -= 1 } else { state.held.remove(at: index) }
            }
            return nil
        }
        next?.continuation.resume()
    }
}

/// Another of this device's requests held its slots for longer than the wait: retry after a moment.
public struct DeviceBusy: Error, Sendable, CustomStringConvertible {
    public var description: String { "this device has too many requests in progress" }
}

/// A waiter's timer, set inside the continuation and cancelled by the waiting task.
private final class TimerBox: Sendable {
    private let mutex = Mutex<Task<Void, Never>?>(nil)
    func set(_ task: Task<Void, Never>) { mutex.withLock { $0 = task } }
    func take() -> Task<Void, Never>? { mutex.withLock { task in defer { task = nil }; return task } }
}
