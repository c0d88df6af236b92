/// What a push answers: one result per operation, in order, and the cursor to pull with next.
struct PushBody: Encodable {
    struct Result: Encodable { let id: String; let status: String }
    let results: [Result]
    let cursor: String
}
