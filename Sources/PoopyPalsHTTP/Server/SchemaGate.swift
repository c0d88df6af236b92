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
    /// The last answer and the order of the check that gave it: a slow check never overwrites a later one's answer.
    private let verdict = Mutex<(ticket: Int, answer: SchemaCompatibility?)>((0, nil))
    private let tickets = Mutex(0)
    private let unreadableSaid = Mutex(false)
    private let pool: ConnectionPool
    private let logger: Logger

    init(pool: ConnectionPool, logger: Logger) {
        self.pool = pool
        self.logger = logger
    }

    private func nextTicket() -> Int {
        tickets.withLock { last in
            last += 1
            return last
        }
    }

    /// The answer for a request now, or nil to serve it. A lock and a comparison: no database.
    func refusal() -> APIError? {
        verdict.withLock { $0.answer }.flatMap(Self.refusal)
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

    /// Asks the database, all of it (waiting for the connection included) within `bound`; keeps the answer and
    /// returns it. Nil when it could not be asked in time (the last answer stands): unreachable, the background
    /// connection busy, or the login may not read the migrations' history (said once).
    @discardableResult
    func check(within bound: Duration = .seconds(2)) async -> SchemaCompatibility? {
        let pool = pool
        let outcome = await withTaskGroup(of: Result<(Int, SchemaCompatibility), any Error>?.self) { group in
            group.addTask {
                do {
                    return .success(try await pool.withConnection(limits: .within(bound)) { connection in
                        // Numbered when it asks, not when its answer arrives.
                        let ticket = self.nextTicket()
                        return (ticket, try SchemaCompatibility.check(on: connection))
                    })
                } catch {
                    return .failure(error)
                }
            }
            group.addTask {
                try? await Task.sleep(for: bound)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        let ticket: Int, found: SchemaCompatibility
        switch outcome {
        case .success(let answer)?:
            (ticket, found) = answer
        case .failure(let error)?:
            if PostgresError.find(in: error) != nil, unreadableSaid.withLock({ said in defer { said = true }; return !said }) {
                logger.warning("cannot tell whether this release serves the database's schema; serving", metadata: [
                    "release": "\(Release.version)", "error": "\(error)",
                ])
            }
            return nil
        case nil:
            return nil
        }
        let before = verdict.withLock { kept -> SchemaCompatibility?? in
            guard ticket > kept.ticket else { return .none }
            defer { kept = (ticket, found) }
            return .some(kept.answer)
        }
        // A later check answered first: its answer stands, and is what this check reports.
        guard case .some(let previous) = before else { return verdict.withLock { $0.answer } }
        if previous != found {
            if found.serves {
                logger.log(level: previous == nil ? .debug : .notice, "\(found.explanation)")
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
