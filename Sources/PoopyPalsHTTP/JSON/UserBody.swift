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
