import Foundation
import Hummingbird
import NIOCore
import PoopyPalsData
import Values

/// JSON responses: camelCase keys, sorted; timestamps as `Timestamp.format` writes them.
enum JSONResponse {
    static let contentType = "application/json; charset=utf-8"

    /// The API's JSON: sorted keys, timestamps as `Timestamp` formats them.
    static func encode(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(try Timestamp.format(date))
        }
        return try encoder.encode(value)
    }

    /// The same bytes as `encode`, written by the value itself (the hot bodies: see `JSONOutput`).
    static func encode(writing value: some JSONWritable) throws -> [UInt8] {
        var output = JSONOutput()
        try value.write(to: &output)
        return output.bytes
    }

    static func make(_ status: HTTPResponse.Status, writing value: some JSONWritable) throws -> Response {
        let bytes = try encode(writing: value)
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func make(_ status: HTTPResponse.Status, _ value: some Encodable) throws -> Response {
        let data = try encode(value)
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }
}
