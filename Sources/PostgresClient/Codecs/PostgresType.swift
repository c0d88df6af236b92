/// A PostgreSQL type, by OID. Only the built-in types this library decodes are named.
public struct PostgresType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let bool = PostgresType(rawValue: 16)
    public static let bytea = PostgresType(rawValue: 17)
    public static let char = PostgresType(rawValue: 18)
    public static let name = PostgresType(rawValue: 19)
    public static let int8 = PostgresType(rawValue: 20)
    public static let int2 = PostgresType(rawValue: 21)
    public static let int4 = PostgresType(rawValue: 23)
    public static let text = PostgresType(rawValue: 25)
    public static let oid = PostgresType(rawValue: 26)
    public static let json = PostgresType(rawValue: 114)
    public static let float4 = PostgresType(rawValue: 700)
    public static let float8 = PostgresType(rawValue: 701)
    public static let bpchar = PostgresType(rawValue: 1042)
    public static let varchar = PostgresType(rawValue: 1043)
    public static let date = PostgresType(rawValue: 1082)
    public static let timestamp = PostgresType(rawValue: 1114)
    public static let timestamptz = PostgresType(rawValue: 1184)
    public static let numeric = PostgresType(rawValue: 1700)
    public static let uuid = PostgresType(rawValue: 2950)
    public static let jsonb = PostgresType(rawValue: 3802)

    private static let names: [PostgresType: String] = [
        .bool: "bool", .bytea: "bytea", .char: "char", .name: "name", .int8: "int8", .int2: "int2",
        .int4: "int4", .text: "text", .oid: "oid", .json: "json", .float4: "float4", .float8: "float8",
        .bpchar: "bpchar", .varchar: "varchar", .date: "date", .timestamp: "timestamp",
        .timestamptz: "timestamptz", .numeric: "numeric", .uuid: "uuid", .jsonb: "jsonb",
    ]

    public var description: String { Self.names[self] ?? "type oid \(rawValue)" }

    var isInteger: Bool { self == .int2 || self == .int4 || self == .int8 || self == .oid }
}
