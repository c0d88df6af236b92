import ExtrasBase64

/// base64url without padding (RFC 4648 §5), as in JWTs and our cursors: swift-extras-base64, which jwt-kit
/// already builds, instead of our own alphabet swaps.
public enum Base64URL {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64.encodeToString(bytes: bytes, options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }

    /// nil for anything that is not base64url (the standard alphabet's `+` and `/` included).
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        try? Base64.decode(bytes: Array(text.utf8), options: [.base64UrlAlphabet, .omitPaddingCharacter])
    }
}
