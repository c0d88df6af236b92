import Foundation
import PoopyPalsData
import Values

struct LogPageBody: Encodable {
    let items: [LogBody]
    let nextCursor: String?

    enum CodingKeys: String, CodingKey { case items, nextCursor }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(items, forKey: .items)
        try container.encode(nextCursor, forKey: .nextCursor)
    }
}

extension LogPageBody: JSONWritable {
    var sizeHint: Int { 32 + items.sizeHint + (nextCursor?.utf8.count ?? 4) }

    func write(to output: inout JSONOutput) throws {
        output.raw(#"{"items":"#)
        try items.write(to: &output)
        output.raw(#","nextCursor":"#)
        output.string(nextCursor)
        output.raw("}")
    }
}
