import Logging
import PoopyPalsData
import PostgresClient

/// A login that is superuser or has BYPASSRLS ignores every policy, FORCEd or not: say so loudly at start.
enum RLSBypassWarning {
    static func check(_ pool: ConnectionPool, logger: Logger) async {
        guard await Database.loginBypassesRowLevelSecurity(on: pool) == true else { return }
        logger.warning("the database login is a superuser or has BYPASSRLS: row-level security does not protect anything; use a non-superuser owner (see README)")
    }
}
