import Foundation
import JWTKit
import PoopyPalsData

/// Claims of the auth provider's tokens: `sub` (the user's uuid), `email`, `exp`.
struct ProfileClaims: JWTPayload {
    let sub: SubjectClaim
    let email: String
    let exp: ExpirationClaim

    func verify(using algorithm: some JWTAlgorithm) throws {
        try exp.verifyNotExpired()
    }
}

/// The verified identity behind a bearer token.
public struct VerifiedIdentity: Sendable {
    public let userID: UUID
    public let email: String
}

/// Verifies HS256 bearer tokens with jwt-kit. The profile's id and email come only from here.
public struct TokenVerifier: Sendable {
    /// The only algorithm accepted; the header must say so (jwt-kit verifies with the key's algorithm but
    /// does not compare it with the header, so a token claiming another `alg` is refused here first).
    static let algorithm = "HS256"
    /// HS256 keys shorter than this are guessable.
    public static let minimumSecretLength = 32

    private let keys: JWTKeyCollection

    /// - Throws: `ConfigurationError` for a secret shorter than 32 characters.
    public init(secret: String) async throws {
        guard secret.utf8.count >= Self.minimumSecretLength else {
            throw ConfigurationError("AUTH_JWT_SECRET must be at least \(Self.minimumSecretLength) characters")
        }
        keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
    }

    /// Verifies `Authorization: Bearer <token>`.
    /// - Throws: `APIError` 401 (`missing_token`, `invalid_token`, `token_expired`).
    func verify(authorization: String?) async throws -> VerifiedIdentity {
        guard let authorization, !authorization.isEmpty else {
            throw APIError.unauthorized("missing_token", "an Authorization: Bearer token is required")
        }
        guard authorization.count <= 8192, authorization.lowercased().hasPrefix("bearer ") else {
            throw APIError.unauthorized("invalid_token", "the Authorization header must be a Bearer token")
        }
        let token = String(authorization.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        guard Self.headerAlgorithm(of: token) == Self.algorithm else {
            throw APIError.unauthorized("invalid_token", "the token is not a valid \(Self.algorithm) token")
        }
        let claims: ProfileClaims
        do {
            claims = try await keys.verify(token, as: ProfileClaims.self)
        } catch let error as JWTError where error.errorType == .claimVerificationFailure {
            throw APIError.unauthorized("token_expired", "the token has expired")
        } catch {
            throw APIError.unauthorized("invalid_token", "the token could not be verified")
        }
        guard let id = UUID(uuidString: claims.sub.value) else {
            throw APIError.unauthorized("invalid_token", "the token's subject is not a user id")
        }
        guard let email = try? Email(claims.email) else {
            throw APIError.unauthorized("invalid_token", "the token's email is not an email address")
        }
        return VerifiedIdentity(userID: id, email: email.normalized)
    }

    /// Mints a token (for `poopypals dev-token` and tests).
    public func mint(userID: UUID, email: String, expiresIn: TimeInterval = 3600) async throws -> String {
        try await keys.sign(ProfileClaims(sub: SubjectClaim(value: userID.uuidString.lowercased()), email: email,
                                          exp: ExpirationClaim(value: Date().addingTimeInterval(expiresIn))))
    }

    /// The `alg` of a compact JWS header, read without trusting anything else in it.
    static func headerAlgorithm(of token: String) -> String? {
        guard let header = token.split(separator: ".", omittingEmptySubsequences: false).first, header.count <= 1024 else { return nil }
        var base64 = header.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
        return object["alg"] as? String
    }
}

/// The service cannot start as configured.
public struct ConfigurationError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
