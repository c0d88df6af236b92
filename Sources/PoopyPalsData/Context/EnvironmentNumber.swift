/// A whole number from an environment variable, for the limits the service is configured with.
enum EnvironmentNumber {
    /// `environment[name]` as a whole number in `range`, or `value` when it is unset or empty.
    /// - Throws: `InvalidField` naming the variable.
    static func read(_ name: String, in range: ClosedRange<Int>, default value: Int,
                     from environment: [String: String]) throws(InvalidField) -> Int {
        guard let text = environment[name], !text.isEmpty else { return value }
        guard text.count <= 10, let number = Int(text), range.contains(number) else {
            throw InvalidField(name, "must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }
}
