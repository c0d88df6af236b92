import Foundation
import PoopyPalsData
import Values

struct UserBody: Encodable {
    let id: String
    let email: String
    let fullName: String?
    let role: String
    let dateOfBirth: CalendarDate?
    let createdAt: Date
    let updatedAt: Date

    init(_ user: User) {
        id = user.id.lowercased
        email = user.email
        fullName = user.fullName
        role = user.role
        dateOfBirth = user.dateOfBirth
        createdAt = user.createdAt
        updatedAt = user.updatedAt
    }
}

extension UserBody: JSONWritable {
    /// Sorted keys; an absent optional is left out, as the encoder leaves it out.
    func write(to output: inout JSONOutput) throws {
        var first = true
        output.raw("{")
        output.key("createdAt", first: &first)
        try output.timestamp(createdAt)
        if let dateOfBirth { output.key("dateOfBirth", first: &first); output.string(dateOfBirth.description) }
        output.key("email", first: &first)
        output.string(email)
        if let fullName { output.key("fullName", first: &first); output.string(fullName) }
        output.key("id", first: &first)
        output.string(id)
        output.key("role", first: &first)
        output.string(role)
        output.key("updatedAt", first: &first)
        try output.timestamp(updatedAt)
        output.raw("}")
    }
}
