import PostgresClient

/// The roles the data layer acts as, named once. Acting as one is always transaction-local
/// (`set_config('role', …, true)`, i.e. `SET LOCAL ROLE`): nothing outlives the transaction on a pooled connection
/// or behind PgBouncer. Device requests switch to `Database.serviceRole` in their first pipeline
/// (`DeviceTransaction`); operator tasks use `actAs(_:)`.
extension Database {
    /// Owns the functions that read or erase any profile (sql/0008): not granted to anyone, not the service.
    public static let profilesRole = "poopypals_profiles"
}

extension Connection {
    /// Acts as `role` until the transaction (or the savepoint) ends; `nil`: back to the login role.
    /// - Throws: `PostgresError` when the login may not act as it (PostgreSQL 16+: membership needs SET).
    func actAs(_ role: String?) throws {
        try query("SELECT set_config('role', \(role ?? "none"), true)")
    }
}
