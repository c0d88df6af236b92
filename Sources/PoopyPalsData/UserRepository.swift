import Foundation
import Logging
import Metrics
import PostgresClient

/// Profiles, created idempotently: calling `ensureProfile` twice, or two hundred times at once, yields one
/// row and success every time.
public struct UserRepository: Sendable {
    public enum Outcome: String, Sendable {
        /// The check found the user.
        case existed
        /// This call inserted it.
        case created
        /// The insert lost a race (SQLSTATE 23505 on the email or the id): the existing row was returned.
        case conflictTreatedAsSuccess
    }

    public struct Profile: Sendable {
        public let user: User
        public let outcome: Outcome
    }

    /// The unique constraints whose violation means "this profile already exists".
    static let profileConstraints: Set<String> = ["users_email_unique", "users_pkey"]

    let database: Database
    private let logger = Logger(label: "poopypals.repo.users")
    private let conflicts = Counter(label: "poopypals_profile_conflicts_total")

    public init(database: Database) {
        self.database = database
    }

    /// Returns the canonical user for `id` / `email`, creating it if neither is known.
    ///
    /// Runs its own transactions: the check commits on its own (it only reads), so an existing user costs one
    /// round trip and a new one two.
    /// - Throws: `InvalidField` before anything is sent; `PostgresError` for any failure other than the
    ///   email/id conflict (including a 23505 on another constraint).
    public func ensureProfile(
        as device: DeviceID, id: UUID, email: String, fullName: String? = nil, dateOfBirth: CalendarDate? = nil
    ) async throws -> Profile {
        let input = try ProfileInput(id: id, email: email, fullName: fullName, dateOfBirth: dateOfBirth)
        log(.debug, "ensureProfile started", input)
        do {
            if let user = try await database.asDevice(device, { tx in try Self.find(input, in: tx, final: true) }) {
                return finish(.existed, user, input)
            }
            do {
                let user = try await database.asDevice(device) { tx in try User(row: tx.finalQuery(input.insert)[0]) }
                return finish(.created, user, input)
            } catch where Self.isProfileConflict(error) {
                guard let user = try await database.asDevice(device, { tx in try Self.find(input, in: tx, final: true) }) else {
                    throw RepositoryError.conflictNotVisible
                }
                return finish(.conflictTreatedAsSuccess, user, input)
            }
        } catch {
            log(.error, "ensureProfile failed", input, error: error)
            throw error
        }
    }

    /// The user with this id, else with this email (as `ensureProfile` would find it); nil when neither exists.
    /// - Throws: `InvalidField` for a malformed email.
    public func find(id: UUID, email: String, as device: DeviceID) async throws -> User? {
        let input = try ProfileInput(id: id, email: email, fullName: nil, dateOfBirth: nil)
        return try await database.asDevice(device, idempotent: true) { tx in try Self.find(input, in: tx, final: true) }
    }

    /// The same, inside the caller's transaction. The insert runs under a savepoint, so a 23505 never aborts
    /// the caller's transaction.
    /// - Throws: as `ensureProfile(as:…)`; `RepositoryError.conflictNotVisible` when the caller's snapshot
    ///   (REPEATABLE READ or stricter) cannot see the row that won the race.
    public func ensureProfile(
        in tx: DeviceTransaction, id: UUID, email: String, fullName: String? = nil, dateOfBirth: CalendarDate? = nil
    ) throws -> Profile {
        let input = try ProfileInput(id: id, email: email, fullName: fullName, dateOfBirth: dateOfBirth)
        log(.debug, "ensureProfile started", input)
        do {
            if let user = try Self.find(input, in: tx, final: false) { return finish(.existed, user, input) }
            do {
                let user = try tx.savepoint { tx in try User(row: tx.query(input.insert)[0]) }
                return finish(.created, user, input)
            } catch where Self.isProfileConflict(error) {
                guard let user = try Self.find(input, in: tx, final: false) else { throw RepositoryError.conflictNotVisible }
                return finish(.conflictTreatedAsSuccess, user, input)
            }
        } catch {
            log(.error, "ensureProfile failed", input, error: error)
            throw error
        }
    }

    /// The user with this id, else the one with this email.
    private static func find(_ input: ProfileInput, in tx: DeviceTransaction, final: Bool) throws -> User? {
        let query: PostgresQuery = """
            SELECT \(unescaped: User.columns) FROM users WHERE id = \(input.id) OR email = \(input.email.normalized)
            ORDER BY (id = \(input.id)) DESC LIMIT 1
            """
        let rows = final ? try tx.finalQuery(query) : try tx.query(query)
        return try rows.first.map(User.init(row:))
    }

    static func isProfileConflict(_ error: any Error) -> Bool {
        guard let error = PostgresError.find(in: error), error.sqlState == .uniqueViolation else { return false }
        return error.constraint.map(profileConstraints.contains) ?? false
    }

    private func finish(_ outcome: Outcome, _ user: User, _ input: ProfileInput) -> Profile {
        switch outcome {
        case .existed: log(.debug, "profile existed", input)
        case .created: log(.info, "profile created", input)
        case .conflictTreatedAsSuccess:
            conflicts.increment()
            log(.notice, "profile conflict treated as success", input)
        }
        if user.id != input.id { log(.warning, "profile found by email under another id", input) }
        return Profile(user: user, outcome: outcome)
    }

    private func log(_ level: Logger.Level, _ message: Logger.Message, _ input: ProfileInput, error: (any Error)? = nil) {
        var metadata: Logger.Metadata = ["user": "\(redacted(input.id))", "email": "\(input.email.redacted)"]
        if let error { metadata["error"] = "\(error)" }
        logger.log(level: level, message, metadata: metadata)
    }
}

/// Validated profile input.
struct ProfileInput: Sendable {
    let id: UUID
    let email: Email
    let fullName: String?
    let dateOfBirth: CalendarDate?

    init(id: UUID, email: String, fullName: String?, dateOfBirth: CalendarDate?) throws(InvalidField) {
        self.id = id
        self.email = try Email(email)
        let name = fullName?.trimmingCharacters(in: .whitespacesAndNewlines)
        if let name, name.unicodeScalars.count > 200 { throw InvalidField("fullName", "is longer than 200 characters") }
        self.fullName = name?.isEmpty == true ? nil : name
        if let dateOfBirth {
            let today = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: Date())
            let limit = CalendarDate(year: today.year!, month: today.month!, day: today.day!)!
            guard dateOfBirth <= limit else { throw InvalidField("dateOfBirth", "is in the future") }
            guard dateOfBirth.year >= 1900 else { throw InvalidField("dateOfBirth", "is before 1900") }
        }
        self.dateOfBirth = dateOfBirth
    }

    /// Role, timestamps and nothing else are left to the database: a caller cannot choose its role.
    var insert: PostgresQuery {
        """
        INSERT INTO users (id, email, full_name, date_of_birth) VALUES (\(id), \(email.normalized), \(fullName), \(dateOfBirth))
        RETURNING \(unescaped: User.columns)
        """
    }
}
