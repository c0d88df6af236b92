import Foundation
import PoopyPalsData
import PostgresClient

/// A database with every migration applied, built once per test process and copied for each test.
/// Its name carries the migrations' checksums, so a changed sql/ folder gets a new template.
public actor MigratedTemplate {
    public static let shared = MigratedTemplate()
    private var building: Task<String, any Error>?

    public func name() async throws -> String {
        if let building { return try await building.value }
        let task = Task { try await Self.build() }
        building = task
        return try await task.value
    }

    private static func build() async throws -> String {
        let files = try MigrationFile.load(directory: TestProject.migrationsDirectory)
        let digest = files.map(\.checksum).joined().utf8.reduce(into: UInt64(1469598103934665603)) {
            $0 = ($0 ^ UInt64($1)) &* 1099511628211
        }
        let name = "tmpl_" + String(digest, radix: 16)
        let server = try TestDatabase.serverConfiguration()
        let admin = ConnectionPool(configuration: .init(connection: server, maxConnections: 1))
        defer { Task { await admin.close() } }
        let exists = try await admin.withConnection {
            try $0.query("SELECT count(*) FROM pg_database WHERE datname = \(name)")[0].decode(0, as: Int.self) == 1
        }
        if exists { return name }

        // Build under a temporary name and rename at the end, so no one copies a half-migrated template.
        let building = name + "_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try await admin.withConnection { try $0.executeScript("CREATE DATABASE \(building)") }
        var configuration = server
        configuration.database = building
        let pool = ConnectionPool(configuration: .init(connection: configuration, maxConnections: 1))
        // Every file, post-deployment ones included: the schema a database ends up with once a release is rolled out
        // (the previous release's own suite and scripts/upgrade_drill.py cover the schema before that step).
        var options = Migrator.Options()
        options.postDeployment = true
        let everything = options
        try await pool.withConnection { try Migrator(files: files, options: everything).migrate(on: $0) }
        await pool.close()
        try await admin.withConnection { conn in
            // Older templates (from earlier migration sets) are no longer needed.
            for stale in try conn.query("SELECT datname FROM pg_database WHERE datname LIKE 'tmpl\\_%' AND datname NOT LIKE \(name + "%")") {
                try conn.executeScript("DROP DATABASE IF EXISTS \(try stale.decode(0, as: String.self))")
            }
            do {
                try conn.executeScript("ALTER DATABASE \(building) RENAME TO \(name)")
            } catch SQLState.duplicateDatabase {
                try conn.executeScript("DROP DATABASE \(building)")  // another process finished first
            }
            try TestDatabase.dropOrphanedServiceRoles(on: conn)
        }
        return name
    }
}
