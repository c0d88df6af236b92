import Foundation
import Logging
import Metrics
import PostgresClient
import Values

/// A field of a profile update: left as it is (absent from the request), set, or cleared (`null`).
public enum FieldUpdate<Value: Sendable & Equatable>: Sendable, Equatable {
    case unchanged
    case set(Value)
    case clear

    var isSet: Bool { if case .unchanged = self { false } else { true } }
    var value: Value? { if case .set(let value) = self { value } else { nil } }
}

/// Profiles, bound to the token's subject and created idempotently: calling `ensureProfile` twice, or two
/// hundred times at once for one subject, yields one row and success every time.
///
/// `users` is under row-level security: a device sees only the user it is linked to. Creating or finding a
/// profile needs to look at every user (is the subject known, is the email taken), so it goes through the
/// database function `poopypals_ensure_profile`, which runs as a role of its own and answers only about the
/// calling subject.
public struct UserRepository: Sendable {
    public enum Outcome: String, Sendable {
        /// The subject's user existed.
        case existed
        /// This call inserted it.
        case created
        /// A concurrent call for the same subject inserted it first (SQLSTATE 23505 on the key or the email):
        /// the existing row was returned.
        case conflictTreatedAsSuccess
    }

    public struct Profile: Sendable {
        public let user: User
        public let outcome: Outcome
    }

    let database: Database
    private let logger = Logger(label: "poopypals.repo.users")
    private let conflicts = Counter(label: "poopypals_profile_conflicts_total")

    public init(database: Database) {
        self.database = database
    }

    /// Creates or finds the profile of subject `id`, applies `fullName` / `dateOfBirth`, and links the calling
    /// device to it: one transaction, one round trip. A failure (an unregistered device, say) leaves nothing.
    /// - Throws: `InvalidField` before anything is sent; `RepositoryError.emailInUse` when another account
    ///   holds the email (nothing about it is revealed); `RepositoryError.deviceNotRegistered`.
    public func ensureProfile(
        as device: DeviceID, id: UUID, email: String,
        fullName: FieldUpdate<String> = .unchanged, dateOfBirth: FieldUpdate<CalendarDate> = .unchanged
    ) async throws -> Profile {
        try await transaction(as: device, ProfileInput(id: id, email: email, fullName: fullName, dateOfBirth: dateOfBirth)) { tx, input, requestID in
            try self.ensure(input, in: tx, final: true, requestID: requestID)
        }
    }

    /// The same, inside the caller's transaction (which then holds the device link too).
    /// - Throws: as `ensureProfile(as:…)`.
    public func ensureProfile(
        in tx: DeviceTransaction, id: UUID, email: String,
        fullName: FieldUpdate<String> = .unchanged, dateOfBirth: FieldUpdate<CalendarDate> = .unchanged
    ) throws -> Profile {
        let input = try ProfileInput(id: id, email: email, fullName: fullName, dateOfBirth: dateOfBirth)
        return try ensure(input, in: tx, final: false, requestID: RequestTrace.id)
    }

    /// `ensureProfile`, and the calling device as linked, in the same transaction (two round trips).
    ///
    /// The device is read before the profile function links it, and answered as the link leaves it (its user, and
    /// last seen at the transaction's time, `now()`, which the function sets): on Citus a statement of the service
    /// role may not read a shard the function (another role) has written in the transaction ("cannot perform query
    /// on placements that were modified in this transaction by a different user").
    /// - Throws: as `ensureProfile(as:…)`.
    public func ensureProfileAndLink(
        as device: DeviceID, id: UUID, email: String,
        fullName: FieldUpdate<String> = .unchanged, dateOfBirth: FieldUpdate<CalendarDate> = .unchanged
    ) async throws -> (profile: Profile, device: Device) {
        try await transaction(as: device, ProfileInput(id: id, email: email, fullName: fullName, dateOfBirth: dateOfBirth)) { tx, input, requestID in
            guard let stored = try tx.storedID(),
                  let row = try tx.query("SELECT \(unescaped: Device.columns), now() AS linked_at FROM devices WHERE id = \(stored)").first else {
                throw RepositoryError.deviceNotRegistered
            }
            let before = try Device(row: row, id: tx.device)
            let linkedAt: Date = try row.decode("linked_at")
            let profile = try self.ensure(input, in: tx, final: true, requestID: requestID)
            return (profile, before.linked(to: profile.user.id, at: linkedAt))
        }
    }

    /// Runs `work` as `device` in one idempotent request transaction, logging a failure with the request id.
    /// The id is a task-local, read here: the work runs on the connection's thread, where it is not set.
    private func transaction<T: Sendable>(
        as device: DeviceID, _ input: ProfileInput,
        _ work: @escaping @Sendable (DeviceTransaction, ProfileInput, String?) throws -> T
    ) async throws -> T {
        let requestID = RequestTrace.id
        do {
            return try await database.asDevice(device, idempotent: true) { tx in try work(tx, input, requestID) }
        } catch {
            // A refusal (email in use, device not registered, invalid input) is the client's: answered with its
            // code, logged where it was decided; only the unexpected is an error here.
            let expected = error is RepositoryError || error is InvalidField
            log(expected ? .debug : .error, "ensureProfile failed", input, requestID: requestID, error: error)
            throw error
        }
    }

    /// The calling device's user if it is subject `id`; nil when the device is linked to no user or another one.
    public func find(id: UUID, as device: DeviceID) async throws -> User? {
        try await database.asDevice(device, idempotent: true, readOnly: true) { tx in
            let stored = try tx.storedID()
            return try tx.finalQuery("""
                SELECT \(unescaped: User.columns) FROM users
                WHERE id = \(id) AND id = (SELECT d.user_id FROM devices d WHERE d.id = \(stored))
                """).first.map(User.init(row:))
        }
    }

    private func ensure(_ input: ProfileInput, in tx: DeviceTransaction, final: Bool, requestID: String?) throws -> Profile {
        func log(_ level: Logger.Level, _ message: Logger.Message) { self.log(level, message, input, requestID: requestID) }
        log(.debug, "ensureProfile started")
        let query: PostgresQuery = """
            SELECT * FROM poopypals_ensure_profile(\(input.id), \(input.email.normalized), \(input.fullName.isSet), \(input.fullName.value),
                                                   \(input.dateOfBirth.isSet), \(input.dateOfBirth.value))
            """
        let row: Row
        do {
            row = try (final ? tx.finalQuery(query) : tx.query(query))[0]
        } catch SQLState.noDataFound {
            throw RepositoryError.deviceNotRegistered
        }
        let outcome: Outcome
        switch try row.decode("outcome", as: String.self) {
        case "existed": outcome = .existed
        case "created": outcome = .created
        case "conflict": outcome = .conflictTreatedAsSuccess
        case "device_linked":
            log(.info, "profile refused: the device is linked to another account")
            throw RepositoryError.deviceLinkedToAnotherProfile
        default:
            log(.info, "profile refused: the email belongs to another account")
            throw RepositoryError.emailInUse
        }
        let user = try User(row: row)
        switch outcome {
        case .existed: log(.debug, "profile existed")
        case .created: log(.info, "profile created")
        case .conflictTreatedAsSuccess:
            conflicts.increment()
            log(.notice, "profile conflict treated as success")
        }
        return Profile(user: user, outcome: outcome)
    }

    private func log(_ level: Logger.Level, _ message: Logger.Message, _ input: ProfileInput, requestID: String?, error: (any Error)? = nil) {
        // Built only when it will be written: it was 4 % of the client's CPU per ensureProfile at the default level.
        guard logger.logLevel <= level else { return }
        var metadata: Logger.Metadata = ["user": "\(redacted(input.id))", "email": "\(input.email.redacted)"]
        if let requestID { metadata["request_id"] = "\(requestID)" }
        if let error { metadata["error"] = "\(error)" }
        logger.log(level: level, message, metadata: metadata)
    }
}

/// Validated profile input.
struct ProfileInput: Sendable {
    let id: UUID
    let email: Email
    let fullName: FieldUpdate<String>
    let dateOfBirth: FieldUpdate<CalendarDate>

    init(id: UUID, email: String, fullName: FieldUpdate<String>, dateOfBirth: FieldUpdate<CalendarDate>) throws(InvalidField) {
        self.id = id
        self.email = try Email(email)
        if case .set(let raw) = fullName {
            let name = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if name.unicodeScalars.count > 200 { throw InvalidField("fullName", "is longer than 200 characters") }
            self.fullName = name.isEmpty ? .clear : .set(name)
        } else {
            self.fullName = fullName
        }
        if case .set(let dateOfBirth) = dateOfBirth {
            let today = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: Date())
            let limit = CalendarDate(year: today.year!, month: today.month!, day: today.day!)!
            guard dateOfBirth <= limit else { throw InvalidField("dateOfBirth", "is in the future") }
            guard dateOfBirth.year >= 1900 else { throw InvalidField("dateOfBirth", "is before 1900") }
        }
        self.dateOfBirth = dateOfBirth
    }
}
