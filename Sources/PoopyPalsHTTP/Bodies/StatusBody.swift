/// `{"status":"ok"}`, the answer of the health checks.
struct StatusBody: Encodable, JSONWritable {
    static let ok = StatusBody(status: "ok")
    let status: String

    func write(to output: inout JSONOutput) {
        output.raw(#"{"status":"#)
        output.string(status)
        output.raw("}")
    }
}
