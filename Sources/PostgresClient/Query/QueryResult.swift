internal import CLibPQ
import Foundation

/// The rows of one statement. Owns its `PGresult` and clears it on deinit.
///
/// A `PGresult` is independent of its connection and never mutated after it is returned, so reading it from
/// any thread is safe: hence `@unchecked Sendable`.
public final class QueryResult: @unchecked Sendable, RandomAccessCollection {
    private let handle: OpaquePointer
    /// Names to numbers, for results wider than `linearLookupLimit` (narrower ones are searched in order: cheaper
    /// than hashing the name, which was 3.5 % of the client's CPU listing 20 logs of 7 columns).
    private let columnIndex: [String: Int]
    /// Whether each column came in binary format (`PostgresQuery.binaryResults`).
    private let binary: [Bool]
    /// Each column's type: read for every value.
    private let types: [PostgresType]
    private static let linearLookupLimit = 16
    public let startIndex = 0
    public let endIndex: Int

    /// Only the types and formats are read up front. Names and the command tag stay in libpq's result until asked
    /// for: a request has four to five results (BEGIN and COMMIT included), and a String for each tag and each
    /// column's name was made for every one of them.
    init(taking handle: OpaquePointer) {
        self.handle = handle
        endIndex = Int(PQntuples(handle))
        let count = Int(PQnfields(handle))
        var types: [PostgresType] = []
        var binary: [Bool] = []
        var index: [String: Int] = [:]
        types.reserveCapacity(count)
        binary.reserveCapacity(count)
        for column in 0..<count {
            types.append(PostgresType(rawValue: PQftype(handle, Int32(column))))
            binary.append(PQfformat(handle, Int32(column)) == 1)
        }
        if count > Self.linearLookupLimit {
            for column in 0..<count {
                let name = String(cString: PQfname(handle, Int32(column)))
                if index[name] == nil { index[name] = column }
            }
        }
        self.types = types
        self.binary = binary
        columnIndex = index
    }

    /// The command tag, such as `INSERT 0 1`.
    public var commandTag: String { String(cString: PQcmdStatus(handle)) }

    /// Column names and types, in order.
    public var columns: [(name: String, type: PostgresType)] {
        types.indices.map { (name(ofColumn: $0), types[$0]) }
    }

    private func name(ofColumn column: Int) -> String {
        PQfname(handle, Int32(column)).map { String(cString: $0) } ?? ""
    }

    deinit { PQclear(handle) }

    var status: ExecStatusType { PQresultStatus(handle) }

    /// The server's error for a failed statement, with every diagnostic field; nil when libpq made the error
    /// itself (no SQLSTATE: a lost connection).
    var serverError: PostgresError? {
        func field(_ code: Int32) -> String? {
            PQresultErrorField(handle, code).map { String(cString: $0) }
        }
        guard let state = field(CLIBPQ_DIAG_SQLSTATE) else { return nil }
        return PostgresError(
            sqlState: SQLState(rawValue: state),
            // PgBouncer's own errors carry only the localized field (S), in English: "FATAL" when it ends the session.
            severity: field(CLIBPQ_DIAG_SEVERITY_NONLOCALIZED) ?? field(CLIBPQ_DIAG_SEVERITY) ?? "ERROR",
            message: field(CLIBPQ_DIAG_MESSAGE_PRIMARY) ?? "",
            detail: field(CLIBPQ_DIAG_MESSAGE_DETAIL), hint: field(CLIBPQ_DIAG_MESSAGE_HINT),
            schema: field(CLIBPQ_DIAG_SCHEMA_NAME), table: field(CLIBPQ_DIAG_TABLE_NAME),
            column: field(CLIBPQ_DIAG_COLUMN_NAME), dataType: field(CLIBPQ_DIAG_DATATYPE_NAME),
            constraint: field(CLIBPQ_DIAG_CONSTRAINT_NAME), position: field(CLIBPQ_DIAG_STATEMENT_POSITION).flatMap { Int($0) })
    }

    /// Rows inserted, updated, deleted, or selected, as the server counted them.
    public var rowsAffected: Int { Int(String(cString: PQcmdTuples(handle))) ?? 0 }

    public subscript(position: Int) -> Row { Row(result: self, row: position) }

    /// The number of the column named `name`, for a caller that decodes many rows by number.
    /// - Throws: `PostgresDecodingError` when the result has no such column.
    public func column(named name: String) throws -> Int {
        guard let number = columnNumber(name) else {
            throw PostgresDecodingError(column: name, expected: "a column", actualType: "none", reason: "no such column in the result")
        }
        return number
    }

    /// `column(named:)`, looking first at `expected`, where a statement of known shape puts the column: one name
    /// compared instead of a walk over the columns before it (a log's seven columns cost 2 200 instructions a
    /// request found by walking, issue 59). Anywhere else, it is found as `column(named:)` finds it.
    /// - Throws: `PostgresDecodingError` when the result has no such column.
    public func column(named name: StaticString, expectedAt expected: Int) throws -> Int {
        if expected >= 0, expected < types.count, let raw = PQfname(handle, Int32(expected)),
           strlen(raw) == name.utf8CodeUnitCount, memcmp(raw, name.utf8Start, name.utf8CodeUnitCount) == 0 {
            return expected
        }
        return try column(named: name.description)
    }

    /// The column number for `name`, matched exactly (no case folding, unlike `PQfnumber`).
    func columnNumber(_ name: String) -> Int? {
        if types.count > Self.linearLookupLimit { return columnIndex[name] }
        var name = name
        // Compared with libpq's bytes where they are, byte for byte: no String per column.
        return name.withUTF8 { wanted -> Int? in
            for column in types.indices {
                guard let raw = PQfname(handle, Int32(column)), strlen(raw) == wanted.count else { continue }
                guard let bytes = wanted.baseAddress else { return column }  // both empty
                if memcmp(raw, bytes, wanted.count) == 0 { return column }
            }
            return nil
        }
    }

    func decode<T: PostgresDecodable>(_ type: T.Type, row: Int, column: Int) throws -> T {
        guard column >= 0, column < types.count else {
            throw PostgresDecodingError(column: "#\(column)", expected: "\(T.self)", actualType: "none",
                                        reason: "no such column")
        }
        do {
            guard row >= 0, row < endIndex else { throw PostgresDecodingFailure("no such row") }
            let (row32, column32) = (Int32(truncatingIfNeeded: row), Int32(truncatingIfNeeded: column))  // both checked above
            // A NULL has length 0: only an empty value is asked whether it is one (a call fewer for nearly every value).
            let length = Swift.max(0, Int(PQgetlength(handle, row32, column32)))
            if length == 0, PQgetisnull(handle, row32, column32) == 1 { return try T.decodeNull() }
            // Read from libpq's bytes: UUIDs, timestamps and integers make no String on the way.
            guard let value = PQgetvalue(handle, row32, column32) else { throw PostgresDecodingFailure("no such row") }
            // No closure: libpq's `char *` read as bytes where it is.
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self), count: length)
            return binary[column] ? try T.decode(postgresBinary: bytes, type: types[column])
                                  : try T.decode(postgresBytes: bytes, type: types[column])
        } catch let failure as PostgresDecodingFailure {
            throw PostgresDecodingError(column: name(ofColumn: column), expected: "\(T.self)",
                                        actualType: types[column].description, reason: failure.reason)
        }
    }
}

/// One row of a `QueryResult`.
public struct Row: Sendable {
    public let result: QueryResult
    let row: Int

    /// Decodes the column named `column`.
    /// - Throws: `PostgresDecodingError` naming the column and expected type.
    public func decode<T: PostgresDecodable>(_ column: String, as type: T.Type = T.self) throws -> T {
        guard let number = result.columnNumber(column) else {
            throw PostgresDecodingError(column: column, expected: "\(T.self)", actualType: "none",
                                        reason: "no such column in the result")
        }
        return try result.decode(type, row: row, column: number)
    }

    /// Decodes the column at `index` (0-based).
    /// - Throws: `PostgresDecodingError` naming the column and expected type.
    public func decode<T: PostgresDecodable>(_ index: Int, as type: T.Type = T.self) throws -> T {
        try result.decode(type, row: row, column: index)
    }
}
