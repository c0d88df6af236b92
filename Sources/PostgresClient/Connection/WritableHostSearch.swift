internal import CLibPQ

/// For a connection string that asks for a writable server (`target_session_attrs=read-write` or `primary`), the
/// check libpq cannot make behind a pooler, and the next host to try.
///
/// libpq decides "read-write" from what the server reports at login (`default_transaction_read_only`,
/// `in_hot_standby`). PgBouncer reports what its first server connection said, long after a switchover changed the
/// node's role: libpq then settled on the PgBouncer of a standby (every write 25006), or refused the new primary's
/// (still "read-only"), for good. So the connection is made with `target_session_attrs=any`, and one query asks the
/// node itself (`pg_is_in_recovery()`, which a pooler passes through); a standby's host is dropped from the list and
/// the next one is tried, in the URL's order.
struct WritableHostSearch {
    /// Host and port pairs still to try; nil when the connection string does not ask for a writable server, or
    /// names its servers in a way not reordered here (`hostaddr`, a Unix socket folder list).
    private(set) var candidates: [(host: String, port: String)]?

    init(connectionString: String?) {
        guard let connectionString else { return }
        var options: [String: String] = [:]
        guard let parsed = PQconninfoParse(connectionString, nil) else { return }
        defer { PQconninfoFree(parsed) }
        var option = parsed
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { options[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        guard let attrs = options["target_session_attrs"], attrs == "read-write" || attrs == "primary",
              options["hostaddr"] == nil, let hostList = options["host"], !hostList.isEmpty else { return }
        let hosts = hostList.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        var ports = (options["port"] ?? "").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        if ports.count <= 1 { ports = Array(repeating: ports.first ?? "", count: hosts.count) }
        guard ports.count == hosts.count, hosts.allSatisfy({ !$0.hasPrefix("/") }) else { return }
        candidates = Array(zip(hosts, ports)).map { (host: $0.0, port: $0.1) }
    }

    /// True when the connection is to be checked after login.
    var checksWritability: Bool { candidates != nil }

    /// Drops the host `raw` reached (found read-only); returns the `host` and `port` values to connect with next,
    /// or nil when no host is left.
    mutating func dropHost(of raw: OpaquePointer) -> (host: String, port: String)? {
        guard var list = candidates else { return nil }
        let host = PQhost(raw).map { String(cString: $0) } ?? ""
        let port = PQport(raw).map { String(cString: $0) } ?? ""
        if let index = list.firstIndex(where: { $0.host == host && ($0.port == port || $0.port.isEmpty) }) {
            list.remove(at: index)
        } else {
            list.removeFirst()
        }
        candidates = list
        guard !list.isEmpty else { return nil }
        return (list.map(\.host).joined(separator: ","), list.map(\.port).joined(separator: ","))
    }

    /// Asks the node `raw` reaches whether it is a standby (in recovery). Nil when the question itself failed.
    static func isStandby(_ raw: OpaquePointer) -> Bool? {
        guard let result = PQexec(raw, "SELECT pg_is_in_recovery()") else { return nil }
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_TUPLES_OK, PQntuples(result) == 1, let value = PQgetvalue(result, 0, 0) else {
            return nil
        }
        return String(cString: value) == "t"
    }
}
