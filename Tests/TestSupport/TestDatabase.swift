import Foundation
import PostgresClient

/// A database of a test's own, created from `DATABASE_URL` and dropped afterwards, so tests run in parallel.
public struct TestDatabase: Sendable {
    public let name: String
    public let configuration: ConnectionConfiguration

    /// The server the tests use. `make test` starts one and sets `DATABASE_URL`; without it, tests fail
    /// loudly rather than skip.
    public static func serverConfiguration() throws -> ConnectionConfiguration {
        guard let url = ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty else {
            throw SetupError("DATABASE_URL is not set: run the tests with `make test`, which starts PostgreSQL")
        }
        var configuration = ConnectionConfiguration(connectionString: url, applicationName: "poopypals-tests")
        if ProcessInfo.processInfo.environment["POOPYPALS_STATEMENT_CACHE"] == "off" { configuration.statementCache = false }
        return configuration
    }

    /// Creates a fresh database, runs `body`, then drops it (also when `body` throws).
    public static func with<T: Sendable>(
        _ body: @Sendable (TestDatabase) async throws -> T
    ) async throws -> T {
        let server = try serverConfiguration()
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
        let admin = ConnectionPool(configuration: .init(connection: server, maxConnections: 1))
        defer { Task { await admin.close() } }
        try await admin.withConnection { try $0.executeScript("CREATE DATABASE \(name)") }
        var configuration = server
        configuration.database = String(name)
        let database = TestDatabase(name: String(name), configuration: configuration)
        do {
            let value = try await body(database)
            try await database.drop(using: admin)
            return value
        } catch {
            try? await database.drop(using: admin)
            throw error
        }
    }

    private func drop(using admin: ConnectionPool) async throws {
        try await admin.withConnection { [name] in try $0.executeScript("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
    }

    /// A pool on this database.
    public func pool(size: Int = 4, acquireTimeout: Duration = .seconds(10)) -> ConnectionPool {
        ConnectionPool(configuration: .init(connection: configuration, maxConnections: size, acquireTimeout: acquireTimeout))
    }

    /// Borrows a connection from a one-off pool of one, for tests that need a single session.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let pool = pool(size: 1)
        do {
            let value = try await pool.withConnection(body)
            await pool.close()
            return value
        } catch {
            await pool.close()
            throw error
        }
    }
}

public struct SetupError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
