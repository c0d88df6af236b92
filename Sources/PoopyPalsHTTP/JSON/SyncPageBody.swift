import PoopyPalsData

struct SyncPageBody: Encodable {
    struct Change: Encodable {
        let op: String
        let log: LogBody?
        let id: String?

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(op, forKey: .op)
            if let log { try container.encode(log, forKey: .log) }
            if let id { try container.encode(id, forKey: .id) }
        }

        enum CodingKeys: String, CodingKey { case op, log, id }
    }

    let changes: [Change]
    let cursor: String
    let hasMore: Bool

    init(_ page: SyncPage) {
        changes = page.changes.map { change in
            switch change {
            case .upsert(let log): Change(op: "upsert", log: LogBody(log), id: nil)
            case .delete(let id): Change(op: "delete", log: nil, id: id.lowercased)
            }
        }
        cursor = page.cursor
        hasMore = page.hasMore
    }
}
