/// `{"logsRemaining": n}`: a device erasure under way (202); the rest goes in the background.
struct ErasureProgressBody: Encodable, JSONWritable {
    let logsRemaining: Int64

    func write(to output: inout JSONOutput) throws {
        try output.bounded(capacity: 48) { output in
            output.raw(#"{"logsRemaining":"#)
            output.integer(logsRemaining)
            output.raw("}")
        }
    }
}
