import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PoopyPalsData
import PostgresNIO

/// The HTTP peer: `GET` and `POST /v1/logs` as a Swift developer would otherwise write them — Hummingbird 2 with
/// vapor/postgres-nio's `PostgresClient` (run as a service of the application, `withTransaction`, interpolated
/// binds, `Codable` in and out) — doing the same request transaction as ours (device key derived on the client,
/// the same context statement, the same SQL) so that `wrk` compares the two stacks on the same work.
/// It runs as a process of its own (`poopypals-bench --serve-peer PORT`), as our server does.
enum HTTPPeer {
    struct NewLog: Decodable {
        let occurredAt: Date
        let bristolType: Int
        let notes: String?
    }

    struct Log: Codable {
        let id: UUID
        let occurredAt: Date
        let bristolType: Int
        let notes: String?
        let createdAt: Date
        let updatedAt: Date
        let version: Int64
    }

    struct Page: Encodable {
        let items: [Log]
        let nextCursor: String?
    }

    static func serve(port: Int, url: String) async throws {
        let logger = Logger(label: "bench.http-peer")
        let client = PostgresNIO.PostgresClient(configuration: try NIOPeer.configuration(url: url, maximumConnections: 16),
                                                backgroundLogger: logger)
        let peer = NIOPeer(client: client)
        let router = Router()
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601

        router.get("/v1/logs") { request, _ -> Response in
            let device = try deviceKey(request)
            let limit = min(max(request.uri.queryParameters.get("limit", as: Int.self) ?? 50, 1), 100)
            let logs = try await client.withTransaction(logger: logger) { conn -> [Log] in
                try await peer.context(conn, key: device.uuidString.lowercased())
                let rows = try await conn.query("""
                    SELECT id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version FROM poop_logs \
                    WHERE device_id = (SELECT d.id FROM devices d WHERE d.key = \(device)) \
                    ORDER BY occurred_at DESC, id DESC LIMIT \(limit + 1)
                    """, logger: logger)
                var logs: [Log] = []
                for try await (id, occurred, bristol, notes, created, updated, version)
                        in rows.decode((UUID, Date, Int16, String?, Date, Date, Int64).self) {
                    logs.append(Log(id: id, occurredAt: occurred, bristolType: Int(bristol), notes: notes,
                                    createdAt: created, updatedAt: updated, version: version))
                }
                return logs
            }
            let more = logs.count > limit
            let items = Array(logs.prefix(limit))
            let cursor = more ? items.last.map { Data("\($0.occurredAt.timeIntervalSince1970)|\($0.id)".utf8).base64EncodedString() } : nil
            return try json(.ok, Page(items: items, nextCursor: cursor ?? nil), encoder)
        }

        router.post("/v1/logs") { request, context -> Response in
            let device = try deviceKey(request)
            let body = try await request.body.collect(upTo: 64 * 1024)
            guard let new = try? decoder.decode(NewLog.self, from: Data(buffer: body)), (1...7).contains(new.bristolType) else {
                throw HTTPError(.badRequest)
            }
            let id = UUID()
            let log = try await client.withTransaction(logger: logger) { conn -> Log? in
                try await peer.context(conn, key: device.uuidString.lowercased())
                let rows = try await conn.query("""
                    INSERT INTO poop_logs (id, device_id, occurred_at, bristol_type, notes) \
                    VALUES (\(id), (SELECT d.id FROM devices d WHERE d.key = \(device)), \(new.occurredAt), \(Int16(new.bristolType)), \(new.notes)) \
                    ON CONFLICT (device_id, id) DO NOTHING \
                    RETURNING id, occurred_at, bristol_type, notes, created_at, updated_at, change_seq AS version
                    """, logger: logger)
                for try await (id, occurred, bristol, notes, created, updated, version)
                        in rows.decode((UUID, Date, Int16, String?, Date, Date, Int64).self) {
                    return Log(id: id, occurredAt: occurred, bristolType: Int(bristol), notes: notes,
                               createdAt: created, updatedAt: updated, version: version)
                }
                return nil
            }
            guard let log else { throw HTTPError(.conflict) }
            return try json(.created, log, encoder)
        }

        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port), serverName: nil),
                              services: [client], logger: logger)
        try await app.runService()
    }

    /// The device id from `X-Device-ID`, and its key as ours derives it.
    private static func deviceKey(_ request: Request) throws -> UUID {
        guard let name = HTTPField.Name("X-Device-ID"), let raw = request.headers[name], let device = try? DeviceID(validating: raw) else {
            throw HTTPError(.unauthorized)
        }
        return device.key
    }

    private static func json(_ status: HTTPResponse.Status, _ value: some Encodable, _ encoder: JSONEncoder) throws -> Response {
        let data = try encoder.encode(value)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
