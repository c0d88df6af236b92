import Hummingbird
import PoopyPalsData

/// `/v1/profile`: the account of the token's subject, created on first use and linked to the calling device.
struct ProfileController: Sendable {
    let users: UserRepository
    let devices: DeviceRepository
    let tokens: TokenVerifier

    func register(on router: Router<APIContext>) {
        router.put("/v1/profile", use: put)
        router.get("/v1/profile", use: get)
    }

    /// Creates or updates the profile of the token's subject and links this device to it, in one transaction.
    /// `fullName` / `dateOfBirth` absent from the body stay as they are; `null` clears them. An email that
    /// belongs to another account is a 409 that reveals nothing about it.
    @Sendable func put(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let identity = try await tokens.verify(authorization: request.headers[.authorization])
        let body = try await JSONBody.read(request, context: context, allowed: ["fullName", "dateOfBirth"],
                                           serverOwned: ["id", "email", "role", "createdAt", "updatedAt", "userId"])
        let fullName = try body.update("fullName", body.string)
        let dateOfBirth = try body.update("dateOfBirth", body.date)
        let (profile, linked) = try await users.ensureProfileAndLink(as: device, id: identity.userID, email: identity.email,
                                                                     fullName: fullName, dateOfBirth: dateOfBirth)
        return try JSONResponse.make(.ok, writing: ProfileBody(user: UserBody(profile.user), device: DeviceBody(linked)))
    }

    @Sendable func get(_ request: Request, context: APIContext) async throws -> Response {
        let device = try context.device()
        let identity = try await tokens.verify(authorization: request.headers[.authorization])
        guard let user = try await users.find(id: identity.userID, as: device) else {
            throw APIError(.notFound, "not_found", "no profile for this token on this device yet; create it with PUT /v1/profile")
        }
        return try JSONResponse.make(.ok, writing: ProfileBody(user: UserBody(user), device: try await devices.current(as: device).map(DeviceBody.init)))
    }
}
