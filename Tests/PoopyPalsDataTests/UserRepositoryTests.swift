import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import Values
import TestSupport

@Suite("UserRepository.ensureProfile")
struct UserRepositoryTests {
    /// Users as the one role that sees them all (the owner sees none: row-level security is forced).
    static func userCount(_ db: TestDatabase) async throws -> Int {
        try await db.withConnection { conn in
            try conn.transaction { conn in
                try conn.query("SELECT set_config('role', poopypals_profiles_role(), true)")
                return try conn.query("SELECT count(*)::int FROM users")[0].decode(0, as: Int.self)
            }
        }
    }

    /// A registered device: profiles are created for, and linked to, the calling device.
    static func device(_ database: Database) async throws -> DeviceID {
        let device = try DeviceID(UUID())
        _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: device)
        return device
    }

    @Test func twiceGivesOneRowTheSameIdAndSuccessBothTimes() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let users = UserRepository(database: database)
            let (device, id) = (try await Self.device(database), UUID())
            let first = try await users.ensureProfile(as: device, id: id, email: "  Chris@Example.COM ", fullName: .set("Chris"))
            let second = try await users.ensureProfile(as: device, id: id, email: "chris@example.com")
            #expect(first.outcome == .created)
            #expect(second.outcome == .existed)
            #expect(first.user.id == id && second.user.id == id)
            #expect(first.user.email == "chris@example.com")
            #expect(first.user.role == "student")
            #expect(second.user.fullName == "Chris")  // absent: left as it is
            let userRows = try await Self.userCount(db)
            #expect(userRows == 1)
        }
    }

    /// The call every sign-in makes once the profile exists and is linked: answered without a lock or a write
    /// (sql/0025). It locked the device and profile rows and rewrote the device row each time (244 bytes of WAL,
    /// about 5x the CPU of reading them). A call that changes a field still writes.
    @Test func aLinkedProfileIsAnsweredWithoutLockingOrWriting() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let users = UserRepository(database: database)
            let (device, id) = (try await Self.device(database), UUID())
            _ = try await users.ensureProfile(as: device, id: id, email: "sam@example.com", fullName: .set("Sam"))
            // Each row's xmin (last writer) and xmax (last locker or deleter), as the one role that sees them all.
            let versions = {
                try await Superuser.column("""
                    SELECT (SELECT d.xmin::text || '/' || d.xmax::text FROM devices d WHERE d.key = '\(device.key.uuidString.lowercased())')
                        || ' ' || (SELECT u.xmin::text || '/' || u.xmax::text FROM users u WHERE u.id = '\(id.uuidString.lowercased())')
                    """, in: db.name)
            }
            let before = try await versions()
            let again = try await users.ensureProfile(as: device, id: id, email: "sam@example.com")
            #expect(again.outcome == .existed && again.user.id == id && again.user.fullName == "Sam")
            #expect(try await versions() == before)
            let changed = try await users.ensureProfile(as: device, id: id, email: "sam@example.com", fullName: .set("Samuel"))
            #expect(changed.outcome == .existed && changed.user.fullName == "Samuel")
            #expect(try await versions() != before)
            await database.pool.close()
        }
    }

    @Test func twoHundredConcurrentCallsForOneSubjectInMixedCaseYieldOneUser() async throws {
        try await TestDatabase.withMigrated { db in
            // 200 transactions on one user row queue behind its lock: on a server that syncs every commit to disk
            // that takes longer than the default 10 s wait for a connection, and waiting is not what is tested; nor
            // is the 3 s a device's tenth call may wait for one of its two slots (it failed so once, under load).
            // Nor the default 2 s lock wait on the user row (its HTTP twin failed so once).
            let database = Database(pool: db.pool(size: 8, acquireTimeout: .seconds(120)),
                                    timeouts: RequestTimeouts(statement: .seconds(25), lock: .seconds(25)),
                                    deviceSlots: DeviceSlots(perDevice: 2, wait: .seconds(120)))
            let users = UserRepository(database: database)
            let spellings = ["sam@example.com", "SAM@example.com", " Sam@Example.com", "sam@EXAMPLE.COM  ", "  sAm@example.com "]
            var devices: [DeviceID] = []
            for _ in 0..<20 { devices.append(try await Self.device(database)) }
            let subject = UUID()
            let frozen = devices
            let profiles = try await withThrowingTaskGroup(of: UserRepository.Profile.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        try await users.ensureProfile(as: frozen[index % frozen.count], id: subject, email: spellings[index % spellings.count])
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(profiles.count == 200)
            #expect(Set(profiles.map(\.user.id)) == [subject])
            #expect(profiles.filter { $0.outcome == .created }.count == 1)
            let userRows = try await Self.userCount(db)
            #expect(userRows == 1)
        }
    }

    /// CI, once in 200 calls under load: a call that did not see its subject's row, then saw the email taken by a
    /// concurrent call for the same subject that committed in between, answered "belongs to another account".
    /// The window is two statements wide, so many subjects are each created by several calls at once; bounded by
    /// count and by time.
    @Test func theSameSubjectCommittingBetweenTheLookupsIsNeverAnotherAccount() async throws {
        try await TestDatabase.withMigrated { db in
            // The calls of one subject queue on its row: the lock wait is not what is tested (default 2 s).
            let database = Database(pool: db.pool(size: 8, acquireTimeout: .seconds(60)),
                                    timeouts: RequestTimeouts(statement: .seconds(25), lock: .seconds(25)))
            let users = UserRepository(database: database)
            // 20 subjects at least, then more for up to 40 s: under `make test`'s load one subject took up to 2 s (9 in
            // 20 s once, 6 and 8 in 40 s on 2026-11-29), so the 20 are waited for, not raced (issue 56), within a hard
            // bound of 180 s that only a hung database reaches.
            let started = ContinuousClock.now
            let deadline = started + .seconds(40), hardDeadline = started + .seconds(180)
            var subjects = 0
            var refused = 0
            while subjects < 400, ContinuousClock.now < (subjects < 20 ? hardDeadline : deadline) {
                let subject = UUID()
                let email = "racer\(subjects)@example.com"
                subjects += 1
                // Devices of this subject's own: a device linked to one subject is not moved to another (sql/0016).
                var devices: [DeviceID] = []
                for _ in 0..<8 { devices.append(try await Self.device(database)) }
                let frozen = devices
                // Only the answer under test counts as a refusal; any other error fails the test as itself.
                refused += try await withThrowingTaskGroup(of: Int.self) { group in
                    for device in frozen {
                        group.addTask {
                            do {
                                _ = try await users.ensureProfile(as: device, id: subject, email: email)
                                return 0
                            } catch RepositoryError.emailInUse {
                                return 1
                            }
                        }
                    }
                    return try await group.reduce(0, +)
                }
            }
            #expect(subjects >= 20)
            #expect(refused == 0, "\(refused) calls refused over \(subjects) subjects")
            let userRows = try await Self.userCount(db)
            #expect(userRows == subjects)
        }
    }

    /// The account-takeover hole: a token of another subject with the same email gets nothing of the first.
    @Test func anotherSubjectWithTheSameEmailIsRefusedAndLearnsNothing() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 8))
            let users = UserRepository(database: database)
            let owner = try await Self.device(database)
            _ = try await users.ensureProfile(as: owner, id: UUID(), email: "victim@example.com", fullName: .set("Victim"),
                                              dateOfBirth: .set(CalendarDate(year: 1990, month: 1, day: 2)!))
            let attacker = try await Self.device(database)
            for spelling in ["victim@example.com", " VICTIM@example.com", "Victim@Example.COM "] {
                await #expect(throws: RepositoryError.emailInUse) {
                    try await users.ensureProfile(as: attacker, id: UUID(), email: spelling)
                }
            }
            // A control character is no longer trimmed away (a token email with a trailing newline was taken): refused.
            let newline = await #expect(throws: InvalidField.self) {
                try await users.ensureProfile(as: attacker, id: UUID(), email: "victim@example.com\n")
            }
            #expect(newline?.field == "email")
            // Nothing linked, nothing readable.
            let visible = try await database.asDevice(attacker) { tx in try tx.finalQuery("SELECT count(*) FROM users")[0].decode(0, as: Int.self) }
            #expect(visible == 0)
            let linked = try await DeviceRepository(database: database).current(as: attacker)
            #expect(linked?.userID == nil)
            let userRows = try await Self.userCount(db)
            #expect(userRows == 1)
            // Racing subjects for one email: exactly one wins, the rest are refused.
            let outcomes = await withTaskGroup(of: Bool.self) { group in
                for _ in 0..<20 {
                    group.addTask { (try? await users.ensureProfile(as: attacker, id: UUID(), email: "race@example.com")) != nil }
                }
                return await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 }.count == 1)
        }
    }

    @Test func aRaceWithTheSameSubjectInsideAnOpenTransactionIsSuccess() async throws {
        try await TestDatabase.withMigrated { db in
            // The insert waits for the other session's commit, released once the test has seen it wait: more than the
            // default 2 s lock timeout, and room for make test's load.
            let database = Database(pool: db.pool(size: 2), timeouts: RequestTimeouts(statement: .seconds(25), lock: .seconds(25)))
            let users = UserRepository(database: database)
            let id = UUID()
            let device = try await Self.device(database)
            // Another session inserts the same subject and commits only after our check has looked.
            // It commits once our insert waits for it (not after a fixed time, which a loaded machine may let pass
            // before our check even runs).
            let release = Locked(false)
            let winner = try await db.inAnotherSession(holdingFor: 60, release: release) { conn in
                try conn.query("SELECT set_config('role', poopypals_profiles_role(), true)")
                try conn.execute("INSERT INTO users (id, email) VALUES (\(id), 'race@example.com')")
            }
            let releaser = Task {
                defer { release.withLock { $0 = true } }
                try await db.waitUntilSessionsWaitOnALock()
            }
            let (outcome, afterwards) = try await database.asDevice(device) { tx in
                let profile = try users.ensureProfile(in: tx, id: id, email: "Race@Example.com")
                // The transaction is still healthy: it can go on and commit.
                let visible = try tx.query("SELECT count(*) FROM users")[0].decode(0, as: Int.self)
                return (profile.outcome, visible)
            }
            try await releaser.value
            try await winner.value
            // On the distributed schema the lookup's FOR UPDATE takes Citus's lock of the reference table's writes, so it
            // waits for the winner and finds its row: "existed", the same success by the other path.
            #expect(outcome == (TestEnvironment.distributesEveryDatabase ? .existed : .conflictTreatedAsSuccess))
            #expect(afterwards == 1)
            #expect(try await DeviceRepository(database: database).current(as: device)?.userID == id)
            let userRows = try await Self.userCount(db)
            #expect(userRows == 1)
        }
    }

    @Test func aUniqueViolationOnAnotherConstraintIsNotSwallowed() async throws {
        try await TestDatabase.withMigrated { db in
            try await db.withConnection { try $0.executeScript("ALTER TABLE users ADD CONSTRAINT users_full_name_key UNIQUE (full_name)") }
            let database = Database(pool: db.pool(size: 2))
            let users = UserRepository(database: database)
            let (device, other) = (try await Self.device(database), try await Self.device(database))
            _ = try await users.ensureProfile(as: device, id: UUID(), email: "a@example.com", fullName: .set("Sam Sample"))
            let error = await #expect(throws: PostgresError.self) {
                try await users.ensureProfile(as: other, id: UUID(), email: "b@example.com", fullName: .set("Sam Sample"))
            }
            #expect(error?.sqlState == .uniqueViolation)
            // Citus relays a worker's error without its constraint field; the message names the shard's constraint.
            if TestEnvironment.distributesEveryDatabase {
                #expect(error?.message.contains("users_full_name_key") == true, "\(String(describing: error))")
            } else {
                #expect(error?.constraint == "users_full_name_key")
            }
            let userRows = try await Self.userCount(db)
            #expect(userRows == 1)
        }
    }

    @Test func aProfileCostsOneRoundTripNewOrNot() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let users = UserRepository(database: database)
            let device = try await Self.device(database)
            let id = UUID()
            var before = try await database.pool.withConnection { $0.roundTrips }
            _ = try await users.ensureProfile(as: device, id: id, email: "new@example.com")
            #expect(try await database.pool.withConnection { $0.roundTrips } - before == 1)
            before = try await database.pool.withConnection { $0.roundTrips }
            _ = try await users.ensureProfile(as: device, id: id, email: "new@example.com")
            #expect(try await database.pool.withConnection { $0.roundTrips } - before == 1)
        }
    }

    @Test func aProfileIsUpdatedFieldByField() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let users = UserRepository(database: database)
            let device = try await Self.device(database)
            let id = UUID()
            let birthday = CalendarDate(year: 1990, month: 5, day: 6)!
            _ = try await users.ensureProfile(as: device, id: id, email: "p@example.com", fullName: .set("Old"), dateOfBirth: .set(birthday))
            let renamed = try await users.ensureProfile(as: device, id: id, email: "p@example.com", fullName: .set("New"))
            #expect(renamed.user.fullName == "New" && renamed.user.dateOfBirth == birthday)
            let cleared = try await users.ensureProfile(as: device, id: id, email: "p@example.com", dateOfBirth: .clear)
            #expect(cleared.user.fullName == "New" && cleared.user.dateOfBirth == nil)
            #expect(try await users.find(id: id, as: device)?.fullName == "New")
        }
    }

    @Test func anUnregisteredDeviceLeavesNoUserBehind() async throws {
        try await TestDatabase.withMigrated { db in
            let users = UserRepository(database: Database(pool: db.pool(size: 2)))
            await #expect(throws: RepositoryError.deviceNotRegistered) {
                try await users.ensureProfile(as: DeviceID(UUID()), id: UUID(), email: "ghost@example.com", fullName: .set("Ghost"))
            }
            let count = try await Self.userCount(db)
            #expect(count == 0)
        }
    }

    @Test func aDeviceSeesAndChangesOnlyTheUserItIsLinkedTo() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let users = UserRepository(database: database)
            let linked = try await Self.device(database)
            let other = try await Self.device(database)
            let unlinked = try await Self.device(database)
            _ = try await users.ensureProfile(as: linked, id: UUID(), email: "one@example.com")
            _ = try await users.ensureProfile(as: other, id: UUID(), email: "two@example.com")
            func visible(_ device: DeviceID) async throws -> [String] {
                try await database.asDevice(device) { tx in try tx.finalQuery("SELECT email FROM users ORDER BY 1").map { try $0.decode(0, as: String.self) } }
            }
            #expect(try await visible(linked) == ["one@example.com"])
            #expect(try await visible(unlinked) == [])
            let renamed = try await database.asDevice(linked) { tx in try tx.finalQuery("UPDATE users SET full_name = 'x'").rowsAffected }
            #expect(renamed == 1)
            let none = try await database.asDevice(unlinked) { tx in try tx.finalQuery("UPDATE users SET full_name = 'x'").rowsAffected }
            #expect(none == 0)
            // The profile function is the only way in, and it runs as its own role.
            let direct = await #expect(throws: PostgresError.self) {
                try await database.asDevice(unlinked) { tx in try tx.finalQuery("INSERT INTO users (id, email) VALUES (\(UUID()), 'z@example.com')") }
            }
            #expect(direct?.sqlState == .insufficientPrivilege)
        }
    }

    @Test func aLegacyUserWithoutARoleStillHasAProfile() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 2))
            let device = try await Self.device(database)
            let id = UUID()
            // Three transactions: Citus refuses a role's write to placements another role wrote in the same transaction.
            try await db.withConnection { conn in
                try conn.executeScript("ALTER TABLE users ALTER COLUMN role DROP NOT NULL")
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('role', poopypals_profiles_role(), true)")
                    try conn.execute("INSERT INTO users (id, email) VALUES (\(id), 'legacy@example.com')")
                }
                try conn.transaction { conn in
                    try conn.executeScript("ALTER TABLE users NO FORCE ROW LEVEL SECURITY")
                    try conn.execute("UPDATE users SET role = NULL WHERE id = \(id)")
                    try conn.executeScript("ALTER TABLE users FORCE ROW LEVEL SECURITY")
                }
            }
            let profile = try await UserRepository(database: database).ensureProfile(as: device, id: id, email: "legacy@example.com")
            #expect(profile.outcome == .existed)
            #expect(profile.user.role == "student")
            #expect(try await UserRepository(database: database).find(id: id, as: device)?.role == "student")
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
            try await users.ensureProfile(as: device, id: UUID(), email: "a@example.com", fullName: .set(String(repeating: "n", count: 201)))
        }
        #expect(longName?.field == "fullName")
        let future = await #expect(throws: InvalidField.self) {
            try await users.ensureProfile(as: device, id: UUID(), email: "a@example.com", dateOfBirth: .set(CalendarDate(year: 2999, month: 1, day: 1)!))
        }
        #expect(future?.field == "dateOfBirth")
        let ancient = await #expect(throws: InvalidField.self) {
            try await users.ensureProfile(as: device, id: UUID(), email: "a@example.com", dateOfBirth: .set(CalendarDate(year: 1850, month: 1, day: 1)!))
        }
        #expect(ancient?.field == "dateOfBirth")
    }

    @Test func theDatabaseItselfRefusesNonNormalisedEmailsAndRoleChangesByTheService() async throws {
        try await TestDatabase.withMigrated { db in
            // Constraints are checked in name order: users_email_canonical (sql/0012) now catches spaces first.
            for (email, constraint) in [("Chris@Example.com", "users_email_normalized"), ("x@y.com\t", "users_email_canonical"),
                                        ("a\u{0B}b@example.com", "users_email_canonical"), ("ann\u{200B}@example.com", "users_email_canonical"),
                                        ("a\u{301}nn@example.com", "users_email_canonical"), ("ann@ex\u{E4}mple.com", "users_email_canonical"),
                                        ("\u{FB01}@example.com", "users_email_canonical")] {
                let check = await #expect(throws: PostgresError.self) {
                    try await db.withConnection { conn in
                        try conn.transaction { conn in
                            try conn.query("SELECT set_config('role', poopypals_profiles_role(), true)")
                            try conn.execute("INSERT INTO users (id, email) VALUES (\(UUID()), \(email))")
                        }
                    }
                }
                #expect(check?.sqlState == .checkViolation)
                if TestEnvironment.distributesEveryDatabase {  // no constraint field from a worker: its message names it
                    #expect(check?.message.contains(constraint) == true, "\(String(describing: check))")
                } else {
                    #expect(check?.constraint == constraint)
                }
            }

            let database = Database(pool: db.pool(size: 1))
            let device = try await Self.device(database)
            let profile = try await UserRepository(database: database).ensureProfile(as: device, id: UUID(), email: "me@example.com")
            for statement: PostgresQuery in [
                "UPDATE users SET role = 'admin' WHERE id = \(profile.user.id)",
                "UPDATE users SET email = 'other@example.com' WHERE id = \(profile.user.id)",
                "INSERT INTO users (id, email, role) VALUES (\(UUID()), 'x@example.com', 'admin')",
            ] {
                let denied = await #expect(throws: PostgresError.self) {
                    try await database.asDevice(device) { tx in try tx.finalQuery(statement) }
                }
                #expect(denied?.sqlState == .insufficientPrivilege)
            }
        }
    }

    /// ASCII addresses are checked on their bytes; the outcome (normalised value or the failure's wording) must be
    /// what the general, Foundation-based check gives, for tricky and for random values.
    @Test func theASCIIEmailCheckAgreesWithTheGeneralOne() {
        func general(_ raw: String) -> String {
            do { return "ok " + (try Email.normalizedUnicode(raw)) } catch { return "failed \(error.reason)" }
        }
        func fast(_ raw: String) -> String? {
            switch Email.checkASCII(raw) {
            case .valid(let value): "ok " + value
            case .failed(let failure): "failed \(failure.reason)"
            case .notASCII: nil
            }
        }
        var cases = ["chris@example.com", "  Chris@Example.COM \t\r\n", "", "   ", "@example.com", "chris@", "chris@example",
                     "chris@.example.com", "chris@example.com.", "chris@exa..mple.com", "a@b@example.com", "chris @example.com",
                     "chris@exam\u{0}ple.com", "\"chris\"@example.com", "a,b@example.com", "a@b.c", ".a@b.c", "a.@b.c",
                     "\u{0B}a@b.c\u{0C}", "a\r\nb@c.d", "a\u{1F}@b.c", "a\u{7F}@b.c", "A@B.C",
                     String(repeating: "a", count: 64) + "@example.com", String(repeating: "a", count: 65) + "@example.com",
                     String(repeating: "a", count: 60) + "@" + String(repeating: "b", count: 189) + ".com",
                     String(repeating: "a", count: 60) + "@" + String(repeating: "b", count: 190) + ".com"]
        let alphabet = Array("aZ09.@ \t\n\r\u{0B}\u{0C}\u{0}\",-_+\u{1F}\u{7F}")
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<3000 {
            let length = Int.random(in: 0...12, using: &generator)
            cases.append(String((0..<length).map { _ in alphabet.randomElement(using: &generator) ?? "a" }))
        }
        for raw in cases {
            #expect(fast(raw) == general(raw), "\(raw.debugDescription)")
        }
        #expect(fast("chrïs@example.com") == nil)
        #expect((try? Email("Chrïs@Example.com"))?.normalized == "chrïs@example.com")
    }

    @Test func emailsAreRedactedInDescriptions() throws {
        let email = try Email("  Chris@Example.com ")
        #expect(email.normalized == "chris@example.com")
        #expect(email.redacted == "c***@example.com")
        #expect("\(email)" == "c***@example.com")
    }
}
