import Foundation
import JWTKit
import PoopyPalsData

/// What a token must say besides being signed with the secret.
public struct TokenRequirements: Sendable, Equatable {
    /// `AUTH_JWT_ISSUER`: when set, `iss` must equal it.
    public var issuer: String?
    /// `AUTH_JWT_AUDIENCE`: when set, `aud` must contain it.
    public var audience: String?
    /// Clock skew allowed on `exp` and `nbf`; at most 60 s.
    public var leeway: Duration = .seconds(30)

    public init(issuer: String? = nil, audience: String? = nil) {
        self.issuer = issuer
        self.audience = audience
    }

    /// `AUTH_JWT_ISSUER` and `AUTH_JWT_AUDIENCE`; empty counts as unset.
    public static func fromEnvironment(_ environment: [String: String]) -> TokenRequirements {
        TokenRequirements(issuer: environment["AUTH_JWT_ISSUER"].flatMap { $0.isEmpty ? nil : $0 },
                          audience: environment["AUTH_JWT_AUDIENCE"].flatMap { $0.isEmpty ? nil : $0 })
    }
}
