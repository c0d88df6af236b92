import Foundation

/// The named prepared statements of one connection, least recently used first out.
///
/// Names are never reused: each is a per-connection random prefix plus a counter that only grows, so a name
/// the client forgot (after an error, an eviction or a pooler's session switch) can never collide with a new
/// one on the server (42P05) or, worse, stand for another statement's SQL. Evicted names are kept until the
/// connection is idle and can close them (`DEALLOCATE`), so the server's side stays bounded too.
struct StatementCache {
    let capacity: Int
    private let prefix: String
    private var counter: UInt64 = 0
    private var clock: UInt64 = 0
    private var entries: [Key: Entry] = [:]
    /// Names evicted from the cache but perhaps still prepared on the server.
    private(set) var namesToClose: [String] = []
    /// Set when the server's set of statements is unknown (26000, 42P05): close them all when idle.
    private(set) var needsDeallocateAll = false

    /// A statement's SQL as the key: its bytes, compared whole, hashed on their count and four 8-byte words of them
    /// (the first, one from the middle, the last two) when there are more than 32: a request's statements are
    /// hundreds of bytes long, and hashing all of them cost 1.3 k instructions a lookup, the first and last 64 still
    /// 1 k (callgrind of `POST /v1/logs`, five lookups a request; issue 59). Two statements alike in all four words
    /// and the count only share a bucket: equality compares every byte. Bytes, not `String`'s canonical
    /// equivalence: what the server prepares is the bytes, and a hash of bytes must come with an equality of bytes.
    private struct Key: Hashable {
        var sql: String

        static func == (left: Key, right: Key) -> Bool {
            var left = left.sql, right = right.sql
            return left.withUTF8 { a in
                right.withUTF8 { b in
                    guard a.count == b.count else { return false }
                    guard let first = a.baseAddress, let second = b.baseAddress else { return a.count == 0 }
                    return memcmp(first, second, a.count) == 0
                }
            }
        }

        func hash(into hasher: inout Hasher) {
            var sql = sql
            sql.withUTF8 { bytes in
                hasher.combine(bytes.count)
                let raw = UnsafeRawBufferPointer(bytes)
                if raw.count <= 32 {
                    hasher.combine(bytes: raw)
                } else {
                    hasher.combine(raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
                    hasher.combine(raw.loadUnaligned(fromByteOffset: raw.count / 2 - 4, as: UInt64.self))
                    hasher.combine(raw.loadUnaligned(fromByteOffset: raw.count - 16, as: UInt64.self))
                    hasher.combine(raw.loadUnaligned(fromByteOffset: raw.count - 8, as: UInt64.self))
                }
            }
        }
    }

    private struct Entry {
        let name: String
        /// `SessionState.mayPersist` of the SQL, computed once.
        let persists: Bool
        var lastUsed: UInt64
    }

    init(capacity: Int) {
        self.capacity = max(1, capacity)
        // 8 random hex digits: two connections behind one pooler backend do not meet on a name.
        prefix = "pp_" + String(UInt32.random(in: 0...UInt32.max), radix: 16) + "_"
    }

    var count: Int { entries.count }

    /// The name `sql` is prepared under and whether it may leave session state, marking it recently used.
    mutating func lookup(_ sql: String) -> (name: String, persists: Bool)? {
        // One hash of the SQL text (hundreds of bytes) per lookup, not one to read and one to write back.
        guard let index = entries.index(forKey: Key(sql: sql)) else { return nil }
        clock += 1
        entries.values[index].lastUsed = clock
        let entry = entries.values[index]
        return (entry.name, entry.persists)
    }

    /// A name that has never been used on this connection.
    mutating func freshName() -> String {
        counter += 1
        return prefix + String(counter)
    }

    /// Records that `sql` is prepared as `name`, evicting the least recently used entry when full.
    mutating func insert(_ sql: String, name: String, persists: Bool) {
        let key = Key(sql: sql)
        if entries.count >= capacity, entries[key] == nil,
           let oldest = entries.min(by: { $0.value.lastUsed < $1.value.lastUsed }) {
            entries[oldest.key] = nil
            namesToClose.append(oldest.value.name)
        }
        clock += 1
        entries[key] = Entry(name: name, persists: persists, lastUsed: clock)
    }

    /// Forgets one statement (its plan went stale: 0A000) and closes it later.
    mutating func evict(_ sql: String) {
        guard let entry = entries.removeValue(forKey: Key(sql: sql)) else { return }
        namesToClose.append(entry.name)
    }

    /// Forgets every statement: the server lost some (26000) or holds one we did not expect (42P05).
    mutating func reset() {
        entries.removeAll()
        namesToClose.removeAll()
        needsDeallocateAll = true
    }

    /// Called once the names have been closed on the server.
    mutating func closed() {
        namesToClose.removeAll()
        needsDeallocateAll = false
    }
}
