import Foundation
import Synchronization

/// The stored id (`devices.id`) of each device key this instance served lately, so that a request's statements name
/// their device's id without looking it up (sql/0030; on Citus the id is what routes a statement to one shard).
///
/// Bounded: two generations of at most `perGeneration` keys each. When the newer is full it becomes the older and the
/// oldest is dropped; a key found in the older moves to the newer. Only ids the database answered for a key are
/// kept (an unknown key keeps nothing), so a client grows it by registered devices only, and at most to
/// 2 × `perGeneration` entries (about 100 bytes each). A kept id is checked by every request that uses it
/// (`poopypals_device_is`): stale, it is forgotten and looked up again.
final class KeptDeviceIDs: Sendable {
    let perGeneration: Int

    private struct State {
        var newer: [UUID: UUID] = [:]
        var older: [UUID: UUID] = [:]
    }

    private let state = Mutex(State())

    init(perGeneration: Int = 50_000) {
        self.perGeneration = max(1, perGeneration)
    }

    /// The id kept for `key`, if any.
    func id(for key: UUID) -> UUID? {
        let perGeneration = perGeneration
        return state.withLock { state in
            if let id = state.newer[key] { return id }
            guard let id = state.older.removeValue(forKey: key) else { return nil }
            Self.insert(id, for: key, into: &state, perGeneration: perGeneration)
            return id
        }
    }

    func keep(_ id: UUID, for key: UUID) {
        let perGeneration = perGeneration
        state.withLock { state in
            state.older[key] = nil
            Self.insert(id, for: key, into: &state, perGeneration: perGeneration)
        }
    }

    func forget(_ key: UUID) {
        state.withLock { state in
            state.newer[key] = nil
            state.older[key] = nil
        }
    }

    /// Keys kept, in both generations.
    var count: Int {
        state.withLock { $0.newer.count + $0.older.count }
    }

    private static func insert(_ id: UUID, for key: UUID, into state: inout State, perGeneration: Int) {
        if state.newer[key] == nil, state.newer.count >= perGeneration {
            state.older = state.newer
            state.newer = [:]
            state.newer.reserveCapacity(perGeneration)
        }
        state.newer[key] = id
    }
}
