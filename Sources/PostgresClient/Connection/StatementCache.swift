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
    private var entries: [String: Entry] = [:]
    /// Names evicted from the cache but perhaps still prepared on the server.
    private(set) var namesToClose: [String] = []
    /// Set when the server's set of statements is unknown (26000, 42P05): close them all when idle.
    private(set) var needsDeallocateAll = false

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
        guard let index = entries.index(forKey: sql) else { return nil }
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
        if entries.count >= capacity, entries[sql] == nil,
           let oldest = entries.min(by: { $0.value.lastUsed < $1.value.lastUsed }) {
            entries[oldest.key] = nil
            namesToClose.append(oldest.value.name)
        }
        clock += 1
        entries[sql] = Entry(name: name, persists: persists, lastUsed: clock)
    }

    /// Forgets one statement (its plan went stale: 0A000) and closes it later.
    mutating func evict(_ sql: String) {
        guard let entry = entries.removeValue(forKey: sql) else { return }
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
