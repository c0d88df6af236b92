import PostgresClient

/// The roles the data layer acts as. Each database has its own (sql/0022): `poopypals_service_role()` names the one
/// every device transaction switches to, `poopypals_profiles_role()` the NOLOGIN owner of the profile, rotation
/// and erasure functions, which the operator tools act as. Acting as one is always transaction-local
/// (`set_config('role', …, true)`, i.e. `SET LOCAL ROLE`): nothing outlives the transaction on a pooled connection
/// or behind PgBouncer. Device requests switch in their first pipeline (`DeviceTransaction`), calling the function
/// there (a constant, folded into the prepared plan); operator tasks read the names with `read(on:)`.
public struct ServiceRoles: Sendable, Equatable {
    public let app: String
    public let profiles: String

    public init(app: String, profiles: String) {
        (self.app, self.profiles) = (app, profiles)
    }

    /// Every database's roles before sql/0022.
    public static let shared = ServiceRoles(app: "poopypals_app", profiles: "poopypals_profiles")

    /// The expression a request's context statement switches role with.
    static let serviceRoleSQL = "poopypals_service_role()"

    /// This database's roles (`shared` before sql/0022), read on `connection`.
    /// - Throws: `PostgresError`.
    public static func read(on connection: Connection) throws -> ServiceRoles {
        let own = try connection.query("""
            SELECT to_regprocedure('poopypals_service_role()') IS NOT NULL
               AND to_regprocedure('poopypals_profiles_role()') IS NOT NULL AS own
            """)[0]
        guard try own.decode("own", as: Bool.self) else { return .shared }
        let names = try connection.query("SELECT poopypals_service_role() AS app, poopypals_profiles_role() AS profiles")[0]
        return ServiceRoles(app: try names.decode("app"), profiles: try names.decode("profiles"))
    }
}

extension Connection {
    /// Acts as `role` until the transaction (or the savepoint) ends; `nil`: back to the login role.
    /// - Throws: `PostgresError` when the login may not act as it (PostgreSQL 16+: membership needs SET).
    func actAs(_ role: String?) throws {
        try query("SELECT set_config('role', \(role ?? "none"), true)")
    }
}
