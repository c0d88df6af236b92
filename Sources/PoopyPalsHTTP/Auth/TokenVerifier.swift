import Foundation
import Values
import JWTKit
import PoopyPalsData

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
    let requirements: TokenRequirements

    /// - Throws: `ConfigurationError` for a secret shorter than 32 characters.
    public init(secret: String, requirements: TokenRequirements = TokenRequirements()) async throws {
        guard secret.utf8.count >= Self.minimumSecretLength else {
            throw ConfigurationError("AUTH_JWT_SECRET must be at least \(Self.minimumSecretLength) characters")
        }
        var requirements = requirements
        requirements.leeway = min(max(requirements.leeway, .zero), .seconds(60))
        self.requirements = requirements
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
        try Self.checkStrictly(token)
        let claims: ProfileClaims
        do {
            claims = try await keys.verify(token, as: ProfileClaims.self)
        } catch {
            throw APIError.unauthorized("invalid_token", "the token could not be verified")
        }
        try check(claims, now: Date())
        guard let id = UUIDText.parse(claims.sub.value), id != DeviceID.nilUUID else {
            throw APIError.unauthorized("invalid_token", "the token's subject is not a user id")
        }
        guard let email = try? Email(claims.email) else {
            throw APIError.unauthorized("invalid_token", "the token's email is not an email address")
        }
        return VerifiedIdentity(userID: id, email: email.normalized)
    }

    /// Times with the leeway, then issuer and audience when they are required.
    /// - Throws: `APIError` 401 `token_expired`, `token_not_yet_valid` or `invalid_token`.
    func check(_ claims: ProfileClaims, now: Date) throws {
        let leeway = Double(requirements.leeway.components.seconds)
        guard claims.exp.value.timeIntervalSince(now) > -leeway else {
            throw APIError.unauthorized("token_expired", "the token has expired")
        }
        // A token valid for a century is a stolen token's best friend: no provider mints one.
        let lifetime = Double(requirements.maxLifetime.components.seconds)
        guard claims.exp.value.timeIntervalSince(now) <= lifetime + leeway else {
            throw APIError.unauthorized("invalid_token", "the token expires further ahead than this service accepts")
        }
        if let nbf = claims.nbf, nbf.value.timeIntervalSince(now) > leeway {
            throw APIError.unauthorized("token_not_yet_valid", "the token is not valid yet")
        }
        if let issuer = requirements.issuer, claims.iss?.value != issuer {
            throw APIError.unauthorized("invalid_token", "the token was issued by someone else")
        }
        if let audience = requirements.audience, claims.aud?.value.contains(audience) != true {
            throw APIError.unauthorized("invalid_token", "the token is meant for another audience")
        }
    }

    /// Mints a token (for `poopypals dev-token` and tests), with the configured issuer and audience.
    public func mint(userID: UUID, email: String, expiresIn: TimeInterval = 3600, notBefore: Date? = nil,
                     issuer: String? = nil, audience: String? = nil) async throws -> String {
        var claims = ProfileClaims(sub: SubjectClaim(value: userID.uuidString.lowercased()), email: email,
                                   exp: ExpirationClaim(value: Date().addingTimeInterval(expiresIn)))
        claims.nbf = notBefore.map(NotBeforeClaim.init(value:))
        claims.iss = (issuer ?? requirements.issuer).map(IssuerClaim.init(value:))
        claims.aud = (audience ?? requirements.audience).map { AudienceClaim(value: [$0]) }
        return try await keys.sign(claims)
    }

    /// Reads the compact JWS's header and payload as strictly as request bodies (`JSONParser`): a member given
    /// twice is refused (parsers disagree on which wins: `{"alg":"none","alg":"HS256"}` passed the check on the
    /// last one, and two `sub` claims were read first-wins by the verifier), and so is any `crit` (RFC 7515
    /// §4.1.11: extensions this service does not understand) and an `alg` other than HS256.
    /// - Throws: `APIError` 401 `invalid_token`.
    static func checkStrictly(_ token: String) throws {
        let invalid = APIError.unauthorized("invalid_token", "the token is not a valid \(algorithm) token")
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count <= 1024, parts[1].count <= 8192 else { throw invalid }
        func object(_ part: Substring) -> [String: JSONValue]? {
            guard let bytes = Base64URL.decode(part) else { return nil }
            let value = try? bytes.withUnsafeBufferPointer { buffer throws(JSONParser.Failure) in try JSONParser.parse(buffer) }
            guard case .object(let members)? = value else { return nil }
            return members
        }
        guard let header = object(parts[0]), object(parts[1]) != nil else { throw invalid }
        guard header["alg"] == .string(algorithm), header["crit"] == nil else { throw invalid }
    }
}
