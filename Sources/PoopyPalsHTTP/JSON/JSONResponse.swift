import Foundation
import Hummingbird
import NIOCore
import PoopyPalsData
import Values

/// JSON responses, written by `JSONOutput`: camelCase keys, sorted; timestamps as `Timestamp` writes them.
enum JSONResponse {
    static let contentType = "application/json; charset=utf-8"

    /// The body's bytes, written by the value itself.
    static func encode(writing value: some JSONWritable) throws -> [UInt8] {
        var output = JSONOutput(capacity: value.sizeHint)
        try value.write(to: &output)
        return output.bytes
    }

    static func make(_ status: HTTPResponse.Status, writing value: some JSONWritable) throws -> Response {
        let bytes = try encode(writing: value)
        return Response(status: status, headers: [.contentType: contentType],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
