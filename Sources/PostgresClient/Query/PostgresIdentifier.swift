/// SQL identifiers (table, column, role and database names) quoted for splicing, since they cannot be bound:
/// double quotes around, every double quote inside doubled; NUL, which no name can hold, dropped.
public enum PostgresIdentifier {
    public static func quoted(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"").replacingOccurrences(of: "\u{0}", with: "") + "\""
    }
}
