import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import PoopyPalsData

/// Every error the API returns: `{ "error": { "code": "snake_case", "message": "…" } }` with its status.
/// Messages never contain SQL, a device id, an email, a token or a password.
public struct APIError: Error, HTTPResponseError, Sendable {
    public let status: HTTPResponse.Status
    public let code: String
    public var message: String
    public var headers: HTTPFields = [:]

    public init(_ status: HTTPResponse.Status, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    /// `{"error":{"code":…,"message":…}}`.
    struct Body: Encodable, JSONWritable {
        struct Detail: Encodable { let code: String; let message: String }
        let error: Detail

        func write(to output: inout JSONOutput) {
            output.raw(#"{"error":{"code":"#)
            output.string(error.code)
            output.raw(#","message":"#)
            output.string(error.message)
            output.raw("}}")
        }
    }

    /// The JSON body, also written by `APIConnection` below the router.
    func body() -> [UInt8] {
        var output = JSONOutput(capacity: 96 + message.utf8.count)
        Body(error: .init(code: code, message: message)).write(to: &output)
        return output.bytes
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = Response(status: status, headers: [.contentType: JSONResponse.contentType],
                                body: ResponseBody(byteBuffer: ByteBuffer(bytes: body())))
        response.headers.append(contentsOf: headers)
        return response
    }

    static func unauthorized(_ code: String, _ message: String) -> APIError { APIError(.unauthorized, code, message) }
    static func invalid(_ field: String, _ reason: String) -> APIError { APIError(.badRequest, "invalid_field", "\(field): \(reason)") }
    static let notFound = APIError(.notFound, "not_found", "no such resource")
    static let weakDeviceID = APIError(.badRequest, "weak_device_id",
                                       "a new device id must be a random (version 4) UUID, such as UUID() makes")

    /// The API's answer for any error thrown below it.
    static func from(_ error: any Error) -> APIError {
        switch error {
        case let error as APIError: return error
        case let error as AuthenticationError:
            return .unauthorized(error == .missingDeviceID ? "missing_device_id" : "invalid_device_id",
                                 error == .missingDeviceID ? "the X-Device-ID header is required" : "X-Device-ID must be a UUID")
        case let error as InvalidField: return .invalid(error.field, error.reason)
        case let error as RepositoryError:
            switch error {
            case .logIDInUse: return APIError(.conflict, "log_id_in_use", error.description)
            case .deviceNotRegistered: return APIError(.conflict, "device_not_registered", "register this device first (PUT /v1/device)")
            case .emailInUse: return APIError(.conflict, "email_in_use", "this email address belongs to another account")
            case .weakDeviceID: return .weakDeviceID
            case .deviceIDInUse: return APIError(.conflict, "device_id_in_use", "the new device id is already registered; nothing was changed")
            case .deviceBeingErased:
                return APIError(.conflict, "device_being_erased", "this device id is being erased; use a new device id, or this one once DELETE /v1/device answers 404")
            case .deviceLinkedToAnotherProfile:
                return APIError(.conflict, "device_linked_to_another_profile",
                                "this device is linked to another account's profile; nothing was changed: register a new device id to use another account")
            }
        case let error as SyncError:
            switch error {
            case .cursorExpired:
                return APIError(.gone, "cursor_expired", "changes after this cursor were purged; pull again without a cursor")
            case .versionConflict(let index):
                return APIError(.conflict, "version_conflict", "\(SyncController.path(ofOperation: index)): the log has changed since its baseVersion; nothing was applied")
            case .logIDInUse(let index):
                return APIError(.conflict, "log_id_in_use", "\(SyncController.path(ofOperation: index)): the log changed while this push ran; nothing was applied: push again")
            case .invalidOperation(let index, let field):
                return .invalid(SyncController.path(ofOperation: index, field: field.field), field.reason)
            }
        case is OutcomeUnknown: return .outcomeUnknown
        case is DeviceBusy: return .deviceBusy
        case let error as RateLimited: return .rateLimited(error)
        case let error as QuotaExceeded: return APIError(.conflict, "quota_exceeded", "\(error.description); nothing was changed")
        case is NIOTooManyBytesError:
            return APIError(.contentTooLarge, "payload_too_large", "the request body is larger than 64 KiB")
        case let error as HTTPError:
            switch error.status {
            case .notFound: return APIError(.notFound, "not_found", "no such route")
            case .methodNotAllowed: return APIError(.methodNotAllowed, "method_not_allowed", "this route does not take that method")
            case .contentTooLarge: return APIError(.contentTooLarge, "payload_too_large", "the request body is larger than 64 KiB")
            default: return APIError(error.status, "http_\(error.status.code)", error.status.reasonPhrase)
            }
        default:
            // The database's failures, as the data layer classifies them; anything else is a bug.
            switch DatabaseFailure(classifying: error) {
            case .busy?: return .busy
            case .timedOut?: return .timedOut
            case .unavailable?: return .databaseUnavailable
            case .valueNotStorable?: return APIError(.badRequest, "invalid_request", "a value in the request cannot be stored (a NUL character?)")
            case nil: return .internalError
            }
        }
    }

    static var databaseUnavailable: APIError {
        var error = APIError(.serviceUnavailable, "database_unavailable", "the database is not reachable; try again shortly")
        error.headers[.retryAfter] = "2"
        return error
    }

    /// COMMIT was sent and never answered (the database failed over or hung at that moment), and replaying the
    /// request within its deadline was not possible: it may or may not have been applied. Send the same request
    /// again: creates carry an id and are recognised, upserts compare content.
    static var outcomeUnknown: APIError {
        var error = APIError(.serviceUnavailable, "outcome_unknown",
                             "the database failed while committing; this request may or may not have been applied: send it again")
        error.headers[.retryAfter] = "2"
        return error
    }

    /// Every connection is busy and none became free in time: the service is overloaded, not broken.
    static var busy: APIError {
        var error = APIError(.serviceUnavailable, "busy", "the service is busy; try again shortly")
        error.headers[.retryAfter] = "1"
        return error
    }

    /// A rate limit of sql/0015: 429 with `Retry-After` and the IETF RateLimit headers
    /// (draft-ietf-httpapi-ratelimit-headers: `RateLimit-Policy: "name";q=…;w=…` and `RateLimit: "name";r=0;t=…`).
    static func rateLimited(_ limited: RateLimited) -> APIError {
        var error = APIError(.tooManyRequests, "rate_limited", limited.description)
        error.headers[.retryAfter] = String(limited.retryAfter)
        error.headers[HTTPField.Name("RateLimit-Policy")!] = "\"\(limited.kind.rawValue)\";q=\(limited.quota);w=\(limited.window)"
        error.headers[HTTPField.Name("RateLimit")!] = "\"\(limited.kind.rawValue)\";r=0;t=\(limited.retryAfter)"
        return error
    }

    /// This device has as many requests at the database as it may, and none finished in time (`DeviceSlots`).
    static var deviceBusy: APIError {
        var error = APIError(.tooManyRequests, "device_busy",
                             "this device has too many requests in progress; nothing was changed; try again shortly")
        error.headers[.retryAfter] = "1"
        return error
    }

    /// This device already has an export being prepared or read, or the instance prepares as many as it may.
    static var exportBusy: APIError {
        var error = APIError(.tooManyRequests, "export_busy",
                             "an export of this device is in progress, or too many exports are; try again shortly")
        error.headers[.retryAfter] = "5"
        return error
    }

    /// The database did not finish in time (statement or lock timeout, or a cancel at shutdown); nothing was
    /// changed by this request.
    static var timedOut: APIError {
        var error = APIError(.serviceUnavailable, "timeout", "the database did not answer in time; nothing was changed; try again shortly")
        error.headers[.retryAfter] = "2"
        return error
    }

    static let internalError = APIError(.internalServerError, "internal_error", "something went wrong on our side")
}
