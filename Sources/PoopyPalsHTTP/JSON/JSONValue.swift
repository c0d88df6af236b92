/// Any JSON value, keeping booleans and numbers apart (`JSONParser` reads it).
enum JSONValue: Equatable, Sendable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])
}
