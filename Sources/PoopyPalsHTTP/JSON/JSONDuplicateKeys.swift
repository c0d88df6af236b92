import Foundation

/// Finds a key that appears twice in one JSON object. Parsers disagree on which one wins (Foundation keeps
/// one, many proxies and WAFs the last), so a body that says two things is refused rather than guessed at.
/// Meant for text a JSON parser has already accepted: it only tracks objects, arrays and strings.
enum JSONDuplicateKeys {
    private enum Frame {
        case object(keys: Set<String>, expectingKey: Bool)
        case array
    }

    /// The first repeated key, or nil.
    static func first(in bytes: some Collection<UInt8>) -> String? {
        let bytes = Array(bytes)
        var stack: [Frame] = []
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "{"): stack.append(.object(keys: [], expectingKey: true))
            case UInt8(ascii: "["): stack.append(.array)
            case UInt8(ascii: "}"), UInt8(ascii: "]"): _ = stack.popLast()
            case UInt8(ascii: ","):
                if case .object(let keys, _) = stack.last { stack[stack.count - 1] = .object(keys: keys, expectingKey: true) }
            case UInt8(ascii: "\""):
                let start = index
                var escaped = false
                index += 1
                while index < bytes.count {
                    if bytes[index] == UInt8(ascii: "\\") { escaped = true; index += 2; continue }
                    if bytes[index] == UInt8(ascii: "\"") { break }
                    index += 1
                }
                guard index < bytes.count else { return nil }
                if case .object(var keys, true) = stack.last {
                    let raw = bytes[start...index]
                    let key = escaped ? ((try? JSONDecoder().decode(String.self, from: Data(raw))) ?? String(decoding: raw, as: UTF8.self))
                        : String(decoding: raw.dropFirst().dropLast(), as: UTF8.self)
                    if !keys.insert(key).inserted { return key }
                    stack[stack.count - 1] = .object(keys: keys, expectingKey: false)
                }
            default: break
            }
            index += 1
        }
        return nil
    }
}
