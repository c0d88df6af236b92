import PoopyPalsData

struct SyncPageBody: Encodable, JSONWritable {
    struct Change: Encodable, JSONWritable {
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

        var sizeHint: Int { 64 + (log?.sizeHint ?? 0) }

        /// Sorted keys: `id` (a delete) or `log` (an upsert), then `op`.
        func write(to output: inout JSONOutput) throws {
            var first = true
            output.raw("{")
            if let id { output.key("id", first: &first); output.string(id) }
            if let log { output.key("log", first: &first); try log.write(to: &output) }
            output.key("op", first: &first)
            output.string(op)
            output.raw("}")
        }
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

    var sizeHint: Int { 64 + changes.sizeHint + cursor.utf8.count }

    func write(to output: inout JSONOutput) throws {
        output.raw(#"{"changes":"#)
        try changes.write(to: &output)
        output.raw(#","cursor":"#)
        output.string(cursor)
        output.raw(#","hasMore":"#)
        output.bool(hasMore)
        output.raw("}")
    }
}
