import Foundation
import JWTKit
import PoopyPalsData

/// The service cannot start as configured.
public struct ConfigurationError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
