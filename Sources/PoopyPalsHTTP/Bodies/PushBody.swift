/// What a push answers: one result per operation, in order, and the cursor to pull with next.
struct PushBody: Encodable, JSONWritable {
    struct Result: Encodable, JSONWritable {
        let id: String
        let status: String

        func write(to output: inout JSONOutput) {
            output.raw(#"{"id":"#)
            output.string(id)
            output.raw(#","status":"#)
            output.string(status)
            output.raw("}")
        }
    }

    let results: [Result]
    let cursor: String

    func write(to output: inout JSONOutput) throws {
        output.raw(#"{"cursor":"#)
        output.string(cursor)
        output.raw(#","results":"#)
        try results.write(to: &output)
        output.raw("}")
    }
}
