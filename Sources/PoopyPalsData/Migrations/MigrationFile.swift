import Crypto
import Foundation

/// One file `sql/NNNN_snake_name.sql` (a pre-deployment migration) or `sql/post/NNNN_snake_name.sql` (a
/// post-deployment one). Versions are one sequence across both folders.
public struct MigrationFile: Sendable, Equatable {
    /// When a migration may run during a rolling upgrade (README "Upgrading"; STYLE.md "Migrations across releases").
    public enum Phase: String, Sendable {
        /// Before any instance is replaced: it only expands, so the previous release keeps serving (`poopypals
        /// migrate`).
        case preDeployment = "pre-deployment"
        /// Once no instance runs the previous release: it may remove or change what that release used (`poopypals
        /// migrate --post-deployment`). Releases before the one that ships it may no longer serve afterwards.
        case postDeployment = "post-deployment"
    }

    /// The sub-folder of the migrations folder that holds the post-deployment files. Releases before 1.1.0 list only
    /// the folder's own `.sql` files, so they neither see nor apply these.
    public static let postDeploymentFolder = "post"

    /// The header line that makes a file run outside a transaction, statement by statement.
    public static let noTransactionHeader = "-- poopypals:no-transaction"
    static let preflightHeader = "-- poopypals:preflight "

    public let version: Int64
    public let name: String
    public let fileName: String
    public let sql: String
    /// SHA-256 of the text with line endings and trailing whitespace normalised.
    public let checksum: String
    public let runsInTransaction: Bool
    /// Checks named by `-- poopypals:preflight NAME` header lines, run before anything is applied.
    public let preflights: [String]
    public let phase: Phase

    public init(fileName: String, sql: String, phase: Phase = .preDeployment) throws {
        guard fileName.hasSuffix(".sql"), let underscore = fileName.firstIndex(of: "_"),
              let version = Int64(fileName[..<underscore]), version > 0
        else { throw MigrationError.invalidFileName(fileName) }
        let name = String(fileName[fileName.index(after: underscore)...].dropLast(4))
        guard !name.isEmpty, name.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "_" }), name.allSatisfy(\.isASCII)
        else { throw MigrationError.invalidFileName(fileName) }
        self.version = version
        self.name = name
        self.fileName = fileName
        self.sql = sql
        self.phase = phase
        checksum = Self.checksum(of: sql)
        let firstLine = sql.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        runsInTransaction = firstLine.trimmingCharacters(in: .whitespaces) != Self.noTransactionHeader
        let header = sql.split(separator: "\n", omittingEmptySubsequences: false)
            .prefix { $0.trimmingCharacters(in: .whitespaces).hasPrefix("--") }
        preflights = header.compactMap { line in
            let text = line.trimmingCharacters(in: .whitespaces)
            guard text.hasPrefix(Self.preflightHeader) else { return nil }
            return text.dropFirst(Self.preflightHeader.count).trimmingCharacters(in: .whitespaces)
        }
    }

    /// The checksum ignores CRLF versus LF, a byte-order mark, trailing whitespace and trailing blank lines,
    /// so that an editor or a git setting cannot make a shipped file look changed.
    public static func checksum(of sql: String) -> String {
        var text = sql.replacingOccurrences(of: "\r\n", with: "\n").replacingOccurrences(of: "\r", with: "\n")
        if text.hasPrefix("\u{FEFF}") { text.removeFirst() }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            var line = Substring(line)
            while let last = line.last, last == " " || last == "\t" { line.removeLast() }
            return line
        }
        while let last = lines.last, last.isEmpty { lines.removeLast() }
        let digest = SHA256.hash(data: Array(lines.joined(separator: "\n").utf8))
        let hex = Array("0123456789abcdef".utf8)
        return String(decoding: digest.flatMap { [hex[Int($0 >> 4)], hex[Int($0 & 0x0f)]] }, as: UTF8.self)
    }

    /// Reads every `.sql` file of `directory` (pre-deployment) and of its `post/` folder, if any
    /// (post-deployment), sorted by version.
    /// - Throws: `MigrationError` for a missing directory, a badly named file or a duplicate version (across both).
    public static func load(directory: URL) throws -> [MigrationFile] {
        var files = try load(folder: directory, phase: .preDeployment)
        let post = directory.appendingPathComponent(postDeploymentFolder)
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: post.path, isDirectory: &isFolder), isFolder.boolValue {
            files += try load(folder: post, phase: .postDeployment)
        }
        files.sort { $0.version < $1.version }
        for (previous, next) in zip(files, files.dropFirst()) where previous.version == next.version {
            throw MigrationError.duplicateVersion(previous.version, [previous.fileName, next.fileName])
        }
        return files
    }

    private static func load(folder: URL, phase: Phase) throws -> [MigrationFile] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        } catch {
            throw MigrationError.directoryNotFound(folder.path)
        }
        return try names.filter { $0.hasSuffix(".sql") }.map { fileName in
            let url = folder.appendingPathComponent(fileName)
            guard let data = FileManager.default.contents(atPath: url.path),
                  let sql = String(data: data, encoding: .utf8)
            else { throw MigrationError.unreadableFile(phase == .postDeployment ? "\(postDeploymentFolder)/\(fileName)" : fileName) }
            return try MigrationFile(fileName: fileName, sql: sql, phase: phase)
        }
    }
}
