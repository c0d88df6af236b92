import Foundation
import JWTKit
import Values
import PoopyPalsData

/// What a token must say besides being signed with the secret.
public struct TokenRequirements: Sendable, Equatable {
    /// `AUTH_JWT_ISSUER`: when set, `iss` must equal it.
    public var issuer: String?
    /// `AUTH_JWT_AUDIENCE`: when set, `aud` must contain it.
    public var audience: String?
    /// Clock skew allowed on `exp` and `nbf`; at most 60 s.
    public var leeway: Duration = .seconds(30)
    /// `AUTH_JWT_MAX_LIFETIME`: a token whose `exp` is further ahead than this is refused (default 24 h).
    public var maxLifetime: Duration = .seconds(24 * 3600)
    public static let lifetimes: ClosedRange<Duration> = .seconds(60)...Duration.seconds(366 * 24 * 3600)

    public init(issuer: String? = nil, audience: String? = nil) {
        self.issuer = issuer
        self.audience = audience
    }

    /// `AUTH_JWT_ISSUER`, `AUTH_JWT_AUDIENCE` (empty counts as unset) and `AUTH_JWT_MAX_LIFETIME` (`DurationText`:
    /// `24h`, `90m`; 1 minute to 366 days).
    /// - Throws: `ConfigurationError` for a lifetime that is not one.
    public static func fromEnvironment(_ environment: [String: String]) throws -> TokenRequirements {
        var requirements = TokenRequirements(issuer: environment["AUTH_JWT_ISSUER"].flatMap { $0.isEmpty ? nil : $0 },
                                             audience: environment["AUTH_JWT_AUDIENCE"].flatMap { $0.isEmpty ? nil : $0 })
        if let text = environment["AUTH_JWT_MAX_LIFETIME"], !text.isEmpty {
            guard let lifetime = DurationText.parse(text), lifetimes.contains(lifetime) else {
                throw ConfigurationError("AUTH_JWT_MAX_LIFETIME must be a duration from 1m to 366d, such as 24h")
            }
            requirements.maxLifetime = lifetime
        }
        return requirements
    }
}
