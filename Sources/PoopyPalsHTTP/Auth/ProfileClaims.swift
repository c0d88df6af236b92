import Foundation
import JWTKit
import PoopyPalsData

/// Claims of the auth provider's tokens: `sub` (the user's uuid), `email`, `exp`; `nbf`, `iss`, `aud` when
/// present. Times are checked by `TokenVerifier` with its leeway, not here.
struct ProfileClaims: JWTPayload {
    let sub: SubjectClaim
    let email: String
    let exp: ExpirationClaim
    var nbf: NotBeforeClaim?
    var iss: IssuerClaim?
    var aud: AudienceClaim?

    func verify(using algorithm: some JWTAlgorithm) throws {}
}
