import Foundation
@testable import PoopyPalsData
@testable import PoopyPalsHTTP
import PostgresClient
import TestSupport
import Testing

/// A release that meets a schema it cannot serve (issue 55) says so: `/readyz` and every `/v1/` request 503 with
/// `Retry-After` and a code naming the cause, never a 500, the log naming both versions, and nothing written.
@Suite("A release that cannot serve the schema") struct SchemaCompatibilityTests {
    /// As a later release's post-deployment migration does once no instance of this release should be left.
    static func raiseOldestRelease(to version: String, on db: TestDatabase) async throws {
        try await db.withConnection { connection in
            try connection.executeScript("""
                CREATE OR REPLACE FUNCTION poopypals_oldest_release() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE \
                AS $$ SELECT '\(version)'::text $$
                """)
        }
    }

    static func newLog(_ id: UUID) -> String {
        #"{"id":"\#(id.uuidString)","occurredAt":"2026-11-20T08:00:00Z","bristolType":4}"#
    }

    @Test func aReleaseOlderThanTheDatabaseSupportsRefusesWith503AndWritesNothing() async throws {
        try await TestDatabase.withAPI(configure: { $0.schemaCheckInterval = .seconds(3600) }) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            try await Self.raiseOldestRelease(to: "9.0.0", on: db)

            let ready = try await api.readyz(until: 503)
            #expect(ready.status == 503)
            #expect(ready.errorCode == "release_unsupported")
            #expect(ready.header("Retry-After") == "5")
            let log = UUID()
            let create = try await api.send("POST", "/v1/logs", device: device, json: Self.newLog(log))
            #expect(create.status == 503)
            #expect(create.errorCode == "release_unsupported")
            #expect(create.header("Retry-After") == "5")
            #expect(try await api.send("GET", "/healthz").status == 200)  // alive: replaced, not restarted
            let said = api.logs.value.joined(separator: "\n")
            #expect(said.contains("release \(Release.version) cannot serve") && said.contains("9.0.0"), "\(said.suffix(2000))")

            // The database takes this release again (a marker set back): it serves at the next check, and the refused
            // create was never written.
            try await Self.raiseOldestRelease(to: "1.0.0", on: db)
            #expect(try await api.readyz(until: 200).status == 200)
            #expect(try await api.send("GET", "/v1/logs/\(log.uuidString)", device: device).status == 404)
            #expect(try await api.send("POST", "/v1/logs", device: device, json: Self.newLog(log)).status == 201)
        }
    }

    @Test func withoutThisReleasesMigrationsItAnswersSchemaBehind() async throws {
        try await TestDatabase.withAPI(configure: { $0.schemaCheckInterval = .seconds(3600) }) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            let row = try await db.withConnection { connection in
                try connection.query("DELETE FROM schema_migrations WHERE version = \(Release.requiredMigration) RETURNING name, checksum, execution_ms")[0]
            }
            let (name, checksum, ms): (String, String, Double) = (try row.decode("name"), try row.decode("checksum"), try row.decode("execution_ms"))
            let ready = try await api.readyz(until: 503)
            #expect(ready.status == 503)
            #expect(ready.errorCode == "schema_behind")
            let read = try await api.send("GET", "/v1/device", device: device)
            #expect(read.status == 503)
            #expect(read.errorCode == "schema_behind")
            #expect(read.header("Retry-After") == "5")
            try await db.withConnection { connection in
                try connection.execute("""
                    INSERT INTO schema_migrations (version, name, checksum, execution_ms) VALUES (\(Release.requiredMigration), \(name), \(checksum), \(ms))
                    """)
            }
            #expect(try await api.readyz(until: 200).status == 200)
            #expect(try await api.send("GET", "/v1/device", device: device).status == 200)
        }
    }

    /// Between two periodic checks (here: none but the first), a request that meets what a later release's
    /// post-deployment migration removed is answered 503 after asking at once, not 500.
    @Test func anErrorASchemaChangeCausesIsAskedAboutAtOnceNever500() async throws {
        try await TestDatabase.withAPI(configure: { $0.schemaCheckInterval = .seconds(3600) }) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            #expect(try await api.send("GET", "/v1/logs", device: device).status == 200)
            try await db.withConnection { connection in
                let role: String = try connection.query("SELECT poopypals_service_role()")[0].decode(0)
                try connection.executeScript("REVOKE SELECT ON poop_logs FROM \"\(role)\"")
            }
            try await Self.raiseOldestRelease(to: "1.2.0", on: db)
            let list = try await api.send("GET", "/v1/logs", device: device)
            #expect(list.status == 503)
            #expect(list.errorCode == "release_unsupported")
            // Then refused before the database: no second error.
            #expect(try await api.send("GET", "/v1/logs", device: device).errorCode == "release_unsupported")
        }
    }

    /// The same revoke without the marker raised is the bug it is: a 500 (the gate asks, and the schema is one this
    /// release should serve).
    @Test func anErrorOnASchemaThisReleaseServesStaysA500() async throws {
        try await TestDatabase.withAPI(configure: { $0.schemaCheckInterval = .seconds(3600) }) { api, db in
            let device = UUID()
            #expect(try await api.send("PUT", "/v1/device", device: device).status == 201)
            try await db.withConnection { connection in
                let role: String = try connection.query("SELECT poopypals_service_role()")[0].decode(0)
                try connection.executeScript("REVOKE SELECT ON poop_logs FROM \"\(role)\"")
            }
            #expect(try await api.send("GET", "/v1/logs", device: device).status == 500)
        }
    }
}
