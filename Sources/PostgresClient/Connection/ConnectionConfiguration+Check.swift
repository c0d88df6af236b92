internal import CLibPQ
import Foundation

extension ConnectionConfiguration {
    /// A connection string libpq would read differently than it looks. libpq takes a string with neither `://`
    /// nor `=` as a database name, so `postgresql//user@db/app` (a colon lost) connected to the local socket.
    public struct MalformedConnectionString: Error, CustomStringConvertible {
        public let reason: String
        public var description: String { "the database URL is malformed: \(reason)" }
    }

    /// Refuses a connection string that is neither a `postgresql://` (or `postgres://`) URI nor a `key=value`
    /// string, or that libpq cannot parse. The reason never holds the password.
    /// - Throws: `MalformedConnectionString`.
    public func checkConnectionString() throws(MalformedConnectionString) {
        guard let text = connectionString else { return }
        let lower = text.lowercased()
        if lower.contains("://") {
            guard lower.hasPrefix("postgresql://") || lower.hasPrefix("postgres://") else {
                throw MalformedConnectionString(reason: "a URI must begin with postgresql:// or postgres://")
            }
        } else if lower.hasPrefix("postgres") {
            throw MalformedConnectionString(reason: "it begins like a URI but lacks \"://\" (libpq would take it for a database name)")
        } else if !text.contains("=") {
            throw MalformedConnectionString(reason: "it is neither a postgresql:// URI nor key=value pairs (libpq would take it for a database name)")
        }
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(text, &error) else {
            let message = error.map { String(cString: $0) } ?? "libpq cannot parse it"
            if let error { PQfreemem(error) }
            throw MalformedConnectionString(reason: ConnectionStringSecrets.scrub(
                message.trimmingCharacters(in: .whitespacesAndNewlines), secrets: secrets))
        }
        PQconninfoFree(options)
    }
}
