@testable import PostgresClient
import Testing

/// Which statements may leave state on a pooled session (then reset before reuse, a round trip).
@Suite("Session state a statement may leave")
struct SessionStateTests {
    @Test(arguments: [
        "SELECT set_config('role', $1, true), set_config('app.device_id', $2, true)",
        // A function call as the value (sql/0022's role): its parentheses are not the call's end.
        "SELECT set_config('role', poopypals_service_role(), true), set_config('app.device_id', $1, true)",
        "SELECT set_config('a', coalesce(nullif($1, ''), 'x'), true)",
        "SELECT set_config('a', 'b,c)', true)",
        "SELECT 1",
    ])
    func transactionLocalOnly(_ sql: String) {
        #expect(!SessionState.mayPersist(sql), "\(sql)")
    }

    @Test(arguments: [
        "SELECT set_config('role', poopypals_service_role(), false)",
        "SELECT set_config('role', f(a, b), true), set_config('x', 'y', false)",
        "SELECT set_config('a', 'b', true",
        "SET ROLE poopypals_app",
        "SELECT pg_advisory_lock(1)",
    ])
    func mayPersist(_ sql: String) {
        #expect(SessionState.mayPersist(sql), "\(sql)")
    }
}
