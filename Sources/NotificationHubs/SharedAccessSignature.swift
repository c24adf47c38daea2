import Crypto
import Foundation
import HeraldModel

/// Notification Hubs' `SharedAccessSignature` token: its format, and whether a key signed it.
///
/// `Authorization: SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key name>`,
/// parameters in any order. The signature is base64(HMAC-SHA256(key, sr + "\n" + se)) over `sr` exactly
/// as written. Which hub and key, and how failures are counted, is herald-auth's (`SASVerifier`).
public enum SharedAccessSignature {
    /// Longest `Authorization` header taken: a token from any SDK is a few hundred bytes.
    public static let maxHeaderLength = 4096
    /// Longest key name (`skn`), as NH's SharedAccessAuthorizationRule allows.
    public static let maxKeyNameLength = 256
    /// What an unknown key's token is checked against, so that it costs what a known one does.
    private static let decoy = SymmetricKey(size: .bits256)

    /// The parts of a token, `sr` kept raw.
    public struct Token: Equatable, Sendable {
        public var rawResource: String
        public var signature: Data
        public var expiry: Int64
        public var keyName: String
    }

    /// Whether `token` is signed with one of the key's two secrets (nil: no such key), unexpired at
    /// `now` (Unix ms) and meant for `resource`; UNAUTHENTICATED with NH's words otherwise.
    /// Synchronous and store-free, so the fuzzer drives it with what `parse` lets through.
    public static func verify(_ token: Token, primary: String?, secondary: String?, now: Int64, resource: String) throws
    {
        let message = Data("\(token.rawResource)\n\(token.expiry)".utf8)
        // Both compared in constant time (swift-crypto's isValidAuthenticationCode), both always,
        // and against the decoy when there is no such key: the answer and its cost are the same.
        let first = HMAC<SHA256>.isValidAuthenticationCode(
            token.signature, authenticating: message, using: primary.map { SymmetricKey(data: Data($0.utf8)) } ?? decoy)
        let second = HMAC<SHA256>.isValidAuthenticationCode(
            token.signature, authenticating: message,
            using: secondary.map { SymmetricKey(data: Data($0.utf8)) } ?? decoy)
        guard primary != nil, first || second else {
            throw ServiceError.unauthenticated("InvalidSignature: The token has an invalid signature.")
        }
        // `parse` bounds `se` to 9999-12-31 (TimeValue), so this product cannot overflow.
        guard token.expiry * 1000 > now else {
            throw ServiceError.unauthenticated("ExpiredToken: The token is expired (se \(token.expiry)).")
        }
        guard SASAudience.covers(SASAudience.normalized(token.rawResource), resource: resource) else {
            throw ServiceError.unauthenticated("40104: Invalid authorization token audience.")
        }
    }

    /// Splits the header into its four parameters, in any order.
    public static func parse(_ header: String) throws -> Token {
        let malformed = ServiceError.unauthenticated(
            "MalformedToken: the Authorization header must be SharedAccessSignature sr=…&sig=…&se=…&skn=…")
        let scheme = "sharedaccesssignature "
        guard header.utf8.count <= maxHeaderLength else { throw malformed }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix(scheme) else { throw malformed }
        var fields: [String: String] = [:]
        for pair in trimmed.dropFirst(scheme.count).split(separator: "&", omittingEmptySubsequences: true) {
            guard let equals = pair.firstIndex(of: "=") else { throw malformed }
            let name = pair[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            guard fields[name] == nil else { throw malformed }
            fields[name] = String(pair[pair.index(after: equals)...])
        }
        guard let sr = fields["sr"], !sr.isEmpty, let sig = fields["sig"]?.removingPercentEncoding,
            let signature = Data(base64Encoded: sig), let seText = fields["se"],
            let expiry = TimeValue.unixSeconds(seText),
            let skn = fields["skn"]?.removingPercentEncoding, !skn.isEmpty, skn.utf8.count <= maxKeyNameLength
        else { throw malformed }
        return Token(rawResource: sr, signature: signature, expiry: expiry, keyName: skn)
    }
}
