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
