import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

@Suite("UserRepository.ensureProfile")
struct UserRepositoryTests {
    static func userCount(_ db: TestDatabase) async throws -> Int {
        try await db.withConnection { try $0.query("SELECT count(*)::int FROM users")[0].decode(0, as: Int.self) }
    }

    @Test func twiceGivesOneRowTheSameIdAndSuccessBothTimes() async throws {
        try await TestDatabase.withMigrated { db in
            let users = UserRepository(database: Database(pool: db.pool(size: 2)))
            let (device, id) = (try DeviceID(UUID()), UUID())
            let first = try await users.ensureProfile(as: device, id: id, email: "  Chris@Example.COM ", fullName: "Chris")
            let second = try await users.ensureProfile(as: device, id: id, email: "chris@example.com")
            #expect(first.outcome == .created)
            #expect(second.outcome == .existed)
            #expect(first.user.id == id && second.user.id == id)
            #expect(first.user.email == "chris@example.com")
            #expect(first.user.role == "student")
            #expect(try await Self.userCount(db) == 1)
        }
    }

    @Test func twoHundredConcurrentCallsWithOneEmailInMixedCaseYieldOneUser() async throws {
        try await TestDatabase.withMigrated { db in
            let users = UserRepository(database: Database(pool: db.pool(size: 8)))
            let spellings = ["sam@example.com", "SAM@example.com", " Sam@Example.com", "sam@EXAMPLE.COM\t", "\nsAm@example.com "]
            // Different ids too: the sister app's bug was one person becoming many users.
            let profiles = try await withThrowingTaskGroup(of: UserRepository.Profile.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        try await users.ensureProfile(as: DeviceID(UUID()), id: UUID(), email: spellings[index % spellings.count])
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(profiles.count == 200)
            #expect(Set(profiles.map(\.user.id)).count == 1)
            #expect(profiles.filter { $0.outcome == .created }.count == 1)
            #expect(try await Self.userCount(db) == 1)
        }
    }

    @Test func aConflictInsideAnOpenTransactionLeavesItUsable() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let users = UserRepository(database: database)
            let (id, device) = (UUID(), UUID())
            try await Seed.device(database, device)
            // Another session inserts the same email and commits only after our check has looked.
            let winner = try await db.inAnotherSession(holdingFor: 0.5) { conn in
                try conn.execute("INSERT INTO users (id, email) VALUES (\(UUID()), 'race@example.com')")
            }
            let (outcome, afterwards) = try await database.asDevice(DeviceID(device)) { tx in
                let profile = try users.ensureProfile(in: tx, id: id, email: "Race@Example.com")
                // The transaction is still healthy: it can go on and commit.
                let linked = try tx.execute("UPDATE devices SET user_id = \(profile.user.id) WHERE id = \(device)")
                return (profile.outcome, linked)
            }
            try await winner.value
            #expect(outcome == .conflictTreatedAsSuccess)
            #expect(afterwards == 1)
            let linked = try await Seed.ids(database, as: device, "SELECT user_id FROM devices")
            #expect(linked.count == 1)
            #expect(try await Self.userCount(db) == 1)
        }
    }

    @Test func aUniqueViolationOnAnotherConstraintIsNotSwallowed() async throws {
        try await TestDatabase.withMigrated { db in
            try await db.withConnection { try $0.executeScript("ALTER TABLE users ADD CONSTRAINT users_full_name_key UNIQUE (full_name)") }
            let users = UserRepository(database: Database(pool: db.pool(size: 2)))
            let device = try DeviceID(UUID())
            _ = try await users.ensureProfile(as: device, id: UUID(), email: "a@example.com", fullName: "Sam Sample")
            let error = await #expect(throws: PostgresError.self) {
                try await users.ensureProfile(as: device, id: UUID(), email: "b@example.com", fullName: "Sam Sample")
            }
            #expect(error?.sqlState == .uniqueViolation)
            #expect(error?.constraint == "users_full_name_key")
            #expect(try await Self.userCount(db) == 1)
        }
    }

    @Test func anExistingUserCostsOneRoundTripAndANewOneTwo() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let users = UserRepository(database: database)
            let device = try DeviceID(UUID())
            var before = try await database.pool.withConnection { $0.roundTrips }
            _ = try await users.ensureProfile(as: device, id: UUID(), email: "new@example.com")
            #expect(try await database.pool.withConnection { $0.roundTrips } - before == 2)
            before = try await database.pool.withConnection { $0.roundTrips }
            _ = try await users.ensureProfile(as: device, id: UUID(), email: "new@example.com")
            #expect(try await database.pool.withConnection { $0.roundTrips } - before == 1)
        }
    }

    @Test(arguments: [
        ("", "email"), ("   ", "email"), ("not-an-email", "email"), ("two@@example.com", "email"),
        ("a b@example.com", "email"), ("x@localhost", "email"), (String(repeating: "a", count: 250) + "@example.com", "email"),
    ])
    func badEmailsAreRefusedBeforeAnythingIsSent(_ email: String, _ field: String) async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let error = await #expect(throws: InvalidField.self) {
                try await UserRepository(database: database).ensureProfile(as: DeviceID(UUID()), id: UUID(), email: email)
            }
            #expect(error?.field == field)
            #expect(database.pool.statistics.open == 0)
        }
    }

    @Test func otherProfileFieldsAreValidated() async throws {
        let users = UserRepository(database: Database(pool: ConnectionPool(configuration: .init(connection: .init(connectionString: "postgresql://nobody@127.0.0.1:1/x")))))
        let device = try DeviceID(UUID())
        let longName = await #expect(throws: InvalidField.self) {
            try await users.ensureProfile(as: device, id: UUID(), email: "a@example.com", fullName: String(repeating: "n", count: 201))
        }
        #expect(longName?.field == "fullName")
        let future = await #expect(throws: InvalidField.self) {
            try await users.ensureProfile(as: device, id: UUID(), email: "a@example.com", dateOfBirth: CalendarDate(year: 2999, month: 1, day: 1))
        }
        #expect(future?.field == "dateOfBirth")
        let ancient = await #expect(throws: InvalidField.self) {
            try await users.ensureProfile(as: device, id: UUID(), email: "a@example.com", dateOfBirth: CalendarDate(year: 1850, month: 1, day: 1))
        }
        #expect(ancient?.field == "dateOfBirth")
    }

    @Test func theDatabaseItselfRefusesNonNormalisedEmailsAndRoleChangesByTheService() async throws {
        try await TestDatabase.withMigrated { db in
            let check = await #expect(throws: PostgresError.self) {
                try await db.withConnection { try $0.execute("INSERT INTO users (id, email) VALUES (\(UUID()), 'Chris@Example.com')") }
            }
            #expect(check?.sqlState == .checkViolation)
            #expect(check?.constraint == "users_email_normalized")

            let database = Database(pool: db.pool(size: 1))
            let profile = try await UserRepository(database: database).ensureProfile(as: DeviceID(UUID()), id: UUID(), email: "me@example.com")
            for statement: PostgresQuery in [
                "UPDATE users SET role = 'admin' WHERE id = \(profile.user.id)",
                "UPDATE users SET email = 'other@example.com' WHERE id = \(profile.user.id)",
                "INSERT INTO users (id, email, role) VALUES (\(UUID()), 'x@example.com', 'admin')",
            ] {
                let denied = await #expect(throws: PostgresError.self) {
                    try await database.asDevice(DeviceID(UUID())) { tx in try tx.finalQuery(statement) }
                }
                #expect(denied?.sqlState == .insufficientPrivilege)
            }
        }
    }

    @Test func emailsAreRedactedInDescriptions() throws {
        let email = try Email("  Chris@Example.com ")
        #expect(email.normalized == "chris@example.com")
        #expect(email.redacted == "c***@example.com")
        #expect("\(email)" == "c***@example.com")
    }
}
