import PostgresClient

/// Erasure requested by email (a person writes to support): the profile, every device linked to it, their
/// logs, tombstones and sync history, in one transaction (`poopypals_erase_user`, sql/0010). Reports counts,
/// never the data.
public struct UserErasure: Sendable {
    public struct Report: Sendable, Equatable, Encodable {
        public let users: Int
        public let devices: Int
        public let logs: Int64
    }

    public init() {}

    /// - Parameter dryRun: count what would be erased; change nothing.
    /// - Throws: `InvalidField` for a malformed email (nothing sent); `PostgresError` otherwise (nothing changed).
    public func run(on connection: Connection, email: String, dryRun: Bool) throws -> Report {
        let email = try Email(email).normalized
        return try connection.transaction { conn in
            // The function belongs to the profile role and is not granted to anyone: run it as that role.
            try conn.actAs(try ServiceRoles.read(on: conn).profiles)
            let row = try conn.query("SELECT users, devices, logs FROM poopypals_erase_user(\(email), \(dryRun))")[0]
            // A dry run only counts (the function deletes nothing then).
            return Report(users: try row.decode("users"), devices: try row.decode("devices"), logs: try row.decode("logs"))
        }
    }
}
