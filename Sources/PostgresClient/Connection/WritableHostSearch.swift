internal import CLibPQ
import Foundation

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
        connectTimeout = options["connect_timeout"].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard let attrs = options["target_session_attrs"], attrs == "read-write" || attrs == "primary",
              options["hostaddr"] == nil, let hostList = options["host"], !hostList.isEmpty else { return }
        let hosts = hostList.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        var ports = (options["port"] ?? "").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        if ports.count <= 1 { ports = Array(repeating: ports.first ?? "", count: hosts.count) }
        guard ports.count == hosts.count, hosts.allSatisfy({ !$0.hasPrefix("/") }) else { return }
        candidates = Array(zip(hosts, ports)).map { (host: $0.0, port: $0.1) }
    }

    /// The connection string's own `connect_timeout`, if it sets one.
    private var connectTimeout: Int?

    /// How long a host may take to answer the check: the connect timeout libpq uses (the string's, else
    /// `seconds`), read as libpq reads it: 2 s at least, and 0 or less (no limit in libpq) as 10 s, never unbounded.
    func checkTimeout(default seconds: Int) -> Duration {
        let value = connectTimeout ?? seconds
        return .seconds(value <= 0 ? 10 : max(2, value))
    }

    /// Hosts dropped so far: found to be standbys, and unable to answer the check.
    private(set) var standbys = 0
    private(set) var unanswered = 0

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

    /// Counts a dropped host's answer: `true` (a standby) or nil (the check failed).
    mutating func noteCheck(standby: Bool?) {
        if standby == true { standbys += 1 } else { unanswered += 1 }
    }

    /// Why no host was taken, once every one was dropped.
    var noWritableHost: String {
        switch (standbys, unanswered) {
        case (_, 0): return "every host of the connection string is a standby (read-only)"
        case (0, _): return "no host of the connection string answered the writable-host check (pg_is_in_recovery())"
        default: return "no host of the connection string is writable (\(standbys) a standby, \(unanswered) did not answer the check)"
        }
    }

    /// Asks the node `raw` reaches whether it is a standby (in recovery), waiting at most `timeout` for the answer.
    /// Nil when the question itself failed or was not answered in time: a PgBouncer queues the query while its pool
    /// is full or its node hangs (for its `query_wait_timeout`, 120 s by default, or without end), and a blocking
    /// `PQexec` held the connect, and the request behind it, as long. The connection is not reusable after a nil.
    /// Schema-qualified: a `search_path` from the connection string cannot put another function in its place.
    static func isStandby(_ raw: OpaquePointer, timeout: Duration) -> Bool? {
        guard PQsendQuery(raw, "SELECT pg_catalog.pg_is_in_recovery()") == 1 else { return nil }
        let deadline = ContinuousClock.now + timeout
        while PQflush(raw) == 1 || PQisBusy(raw) == 1 {  // PQflush: a blocking socket has sent it all already
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return nil }
            let (seconds, attoseconds) = left.components
            let milliseconds = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
            var descriptor = pollfd(fd: PQsocket(raw), events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, milliseconds)
            if ready < 0 && errno != EINTR { return nil }
            if ready > 0 && PQconsumeInput(raw) == 0 { return nil }
        }
        var answer: Bool?
        var first = true
        while let result = PQgetResult(raw) {
            defer { PQclear(result) }
            guard first else { answer = nil; continue }
            first = false
            if PQresultStatus(result) == PGRES_TUPLES_OK, PQntuples(result) == 1, let value = PQgetvalue(result, 0, 0) {
                answer = String(cString: value) == "t"
            }
        }
        return answer
    }
}
