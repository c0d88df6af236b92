internal import CLibPQ
import Foundation

/// Finds the password in a connection string so that messages can be scrubbed of it. The string itself is
/// never rebuilt or modified: it still goes to libpq untouched.
enum ConnectionStringSecrets {
    /// Every form of the password the string holds: as libpq reads it and as written in a URI.
    static func passwords(in connectionString: String) -> [String] {
        [password(in: connectionString), uriPassword(in: connectionString)].compactMap { $0 }
    }

    static func password(in connectionString: String) -> String? {
        var error: UnsafeMutablePointer<CChar>?
        if let options = PQconninfoParse(connectionString, &error) {
            defer { PQconninfoFree(options) }
            var option = options
            while let keyword = option.pointee.keyword {
                if String(cString: keyword) == "password", let value = option.pointee.val {
                    return String(cString: value)
                }
                option += 1
            }
            return nil
        }
        if let error { PQfreemem(error) }
        return uriPassword(in: connectionString)
    }

    /// The password in a URI's userinfo (`scheme://user:password@host`), as written.
    private static func uriPassword(in connectionString: String) -> String? {
        guard let scheme = connectionString.range(of: "://") else { return nil }
        let rest = connectionString[scheme.upperBound...]
        guard let at = rest.lastIndex(of: "@"), let colon = rest[..<at].firstIndex(of: ":") else { return nil }
        let raw = String(rest[rest.index(after: colon)..<at])
        return raw.isEmpty ? nil : raw
    }

    /// `message` with every secret (and its percent-decoded form) replaced by `***`.
    static func scrub(_ message: String, secrets: [String]) -> String {
        var text = message
        for secret in secrets where !secret.isEmpty {
            for form in Set([secret, secret.removingPercentEncoding ?? secret]) where !form.isEmpty {
                text = text.replacingOccurrences(of: form, with: "***")
            }
        }
        return text
    }
}
