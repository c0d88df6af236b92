/// Input that is refused before it reaches the database, naming the field. Never quotes the value.
public struct InvalidField: Error, Sendable, Equatable, CustomStringConvertible {
    /// The field's name as the API spells it (`bristolType`, `email`).
    public let field: String
    public let reason: String

    public init(_ field: String, _ reason: String) {
        self.field = field
        self.reason = reason
    }

    public var description: String { "\(field): \(reason)" }
}
