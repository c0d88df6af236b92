import PostgresClient

/// The registration limit's memory (sql/0015, 0037): a row per client network that registered a device, keyed by
/// `NetworkKeys`, holding the tokens left and when they were counted. A bucket that has refilled to its burst holds
/// nothing a missing row does not, so it is deleted: by every instance's background work (each minute) and by
/// `poopypals maintenance`. The table then holds only networks that registered within one refill window (burst /
/// rate: 15 minutes by default, for an IPv4 address, an IPv6 /64 and a /48 alike).
public enum RegistrationBuckets {
    /// Deletes every full bucket under `rates`, in a transaction of its own, as the service role; returns how many.
    /// - Throws: `PostgresError`; `TransactionError`.
    public static func forgetFull(_ database: Database) async throws -> Int64 {
        let rates = database.rates
        return try await database.asSystem(idempotent: true) { conn in try forgetFull(rates, in: conn) }
    }

    /// The same on `connection` (its own transaction), for the tools: `poopypals maintenance`.
    public static func forgetFull(on connection: Connection, rates: RateLimits) throws -> Int64 {
        try connection.transaction { conn in try forgetFull(rates, in: conn) }
    }

    private static func forgetFull(_ rates: RateLimits, in conn: Connection) throws -> Int64 {
        try conn.query("SELECT set_config('role', \(unescaped: ServiceRoles.serviceRoleSQL), true)")
        return try conn.query("""
            SELECT poopypals_forget_full_registration_buckets(\(Double(rates.registrationBurst)), \(rates.registrationRate),
                \(Double(rates.wideRegistrationBurst)), \(rates.wideRegistrationRate))
            """)[0].decode(0, as: Int64.self)
    }
}
