import Foundation
import PostgresClient
import Values

/// A user row. `role` is decided by the server, never by a caller.
public struct User: Sendable, Equatable, Codable {
    public let id: UUID
    public let email: String
    public let fullName: String?
    public let role: String
    public let dateOfBirth: CalendarDate?
    public let createdAt: Date
    public let updatedAt: Date

    /// A legacy row may have no role: it reads as the default, never as a decoding failure.
    static let columns = "id, email, full_name, coalesce(role, 'student') AS role, date_of_birth, created_at, updated_at"

    init(row: Row) throws {
        id = try row.decode("id")
        email = try row.decode("email")
        fullName = try row.decode("full_name")
        role = try row.decode("role")
        dateOfBirth = try row.decode("date_of_birth")
        createdAt = try row.decode("created_at")
        updatedAt = try row.decode("updated_at")
    }
}
