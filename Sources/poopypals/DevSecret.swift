import ArgumentParser
import Foundation
import Values
import Logging
import PoopyPalsData
import PoopyPalsHTTP
import PostgresClient

/// The development secret, kept per user, not per folder, so that `dev-token` finds what `serve --dev` wrote
/// from any directory (it looked for `.dev/jwt-secret` under the current one): `POOPYPALS_DEV_SECRET_FILE`, else
/// `$XDG_STATE_HOME/poopypals/jwt-secret`, else `~/.local/state/poopypals/jwt-secret`.
enum DevSecret {
    static var path: String {
        let environment = ProcessInfo.processInfo.environment
        if let file = environment["POOPYPALS_DEV_SECRET_FILE"], !file.isEmpty { return file }
        let state = environment["XDG_STATE_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? ((environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()) + "/.local/state")
        return state + "/poopypals/jwt-secret"
    }

    static func load() -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }

    static func loadOrCreate() throws -> String {
        if let existing = load() { return existing }
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        let path = path
        let folder = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        guard FileManager.default.createFile(atPath: path, contents: Data(secret.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw ConfigurationError("cannot write \(path)")
        }
        return secret
    }
}
