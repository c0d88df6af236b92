import Foundation
import Values

/// Tables and JSON for command output.
enum OutputFormat {
    static func table(_ header: [String], _ rows: [[String]]) -> String {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            row.enumerated().map { column, value in
                column == row.count - 1 ? value : value.padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }

    static func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // The API's own format (RFC 3339, UTC, whole seconds; proleptic Gregorian before 1582, as PostgreSQL).
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(try Timestamp.format(date))
        }
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// `2026-11-23 10:00:00` in UTC: `Timestamp`'s form, for a table.
    static func timestamp(_ date: Date) -> String {
        guard let text = try? Timestamp.format(date) else { return "?" }
        return String(text.dropLast()).replacingOccurrences(of: "T", with: " ")
    }
}
