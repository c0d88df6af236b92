import Logging
import PoopyPalsData
import PostgresClient
import ServiceLifecycle
import Synchronization

/// Whether this instance's release can serve the database's schema (`SchemaCompatibility`), as last asked: at
/// start, every few seconds (`SchemaWatch`), at each `/readyz`, and at once after a request met an error a changed
/// schema causes. While it cannot, every `/v1/` request is answered 503 with the verdict's code and `Retry-After`
/// before anything is sent to the database (it never writes), and `/readyz` says 503 with the same code, so a load
/// balancer takes the instance out. Until the first answer (or when it cannot be asked), requests are served.
final class SchemaGate: Sendable {
    private let verdict = Mutex<SchemaCompatibility?>(nil)
    private let unreadableSaid = Mutex(false)
    private let pool: ConnectionPool
    private let logger: Logger

    init(pool: ConnectionPool, logger: Logger) {
        self.pool = pool
        self.logger = logger
    }

    /// The answer for a request now, or nil to serve it. A lock and a comparison: no database.
    func refusal() -> APIError? {
        verdict.withLock { $0 }.flatMap(Self.refusal)
    }

    static func refusal(_ verdict: SchemaCompatibility) -> APIError? {
        guard let code = verdict.code else { return nil }
        let message = switch verdict {
        case .releaseTooOld:
            "this instance runs a release the database no longer supports; nothing was changed; try again (another instance can serve)"
        default:
            "this instance runs a release whose migrations the database lacks; nothing was changed; try again shortly"
        }
        var error = APIError(.serviceUnavailable, code, message)
        error.headers[.retryAfter] = "5"
        return error
    }

    /// Asks the database within 2 s; keeps the answer and returns it. Nil when it could not be asked (the last
    /// answer stands): unreachable, or the login may not read the migrations' history (said once).
    @discardableResult
    func check() async -> SchemaCompatibility? {
        let found: SchemaCompatibility
        do {
            found = try await pool.withConnection(limits: .within(.seconds(2))) { try SchemaCompatibility.check(on: $0) }
        } catch {
            if PostgresError.find(in: error) != nil, unreadableSaid.withLock({ said in defer { said = true }; return !said }) {
                logger.warning("cannot tell whether this release serves the database's schema; serving", metadata: [
                    "release": "\(Release.version)", "error": "\(error)",
                ])
            }
            return nil
        }
        let before = verdict.withLock { kept in
            defer { kept = found }
            return kept
        }
        if before != found {
            if found.serves {
                logger.log(level: before == nil ? .debug : .notice, "\(found.explanation)")
            } else {
                logger.error("\(found.explanation); answering 503 \(found.code ?? "")", metadata: ["release": "\(Release.version)"])
            }
        }
        return found
    }
}

/// Asks `SchemaGate` at start and every `interval` (`APIConfiguration.schemaCheckInterval`) until shutdown.
struct SchemaWatch: Service {
    let gate: SchemaGate
    let interval: Duration

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await gate.check()
                try await Task.sleep(for: interval)
            }
        }
    }
}
