import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PoopyPalsData
import Values

extension HTTPField.Name {
    static let requestID = HTTPField.Name("X-Request-ID")!
    static let deviceID = HTTPField.Name("X-Device-ID")!
    static let consistencyToken = HTTPField.Name("Consistency-Token")!
}

extension HTTPFields {
    /// The value of `name`, as `self[name]` gives it, without building one when a single field has that name:
    /// the subscript joins the values of every field of the name through a lazy map, about 2 k instructions a
    /// lookup (a request made three or four). Two or more fields are joined by the subscript, as before.
    func value(of name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            guard found == nil else { return self[name] }
            found = field.value
        }
        return found
    }
}
