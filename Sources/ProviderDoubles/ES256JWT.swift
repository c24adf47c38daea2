public import Crypto
public import Foundation

/// ES256 JSON Web Tokens as the push services check them: APNs' provider tokens and Web Push's
/// VAPID. Written with Foundation and swift-crypto only, not with Herald's own encoders or
/// jwt-kit (which Herald's senders sign with), so that a double does not agree with the sender by
/// sharing its code.
public enum ES256JWT {
    /// Why a token is refused.
    public struct Refusal: Error, Equatable, Sendable {
        public var reason: String
    }

    /// A verified token's header and claims, as JSON objects.
    public struct Verified: @unchecked Sendable {
        public var header: [String: Any]
        public var claims: [String: Any]
    }

    /// Verifies `jwt`'s ES256 signature with `key` and returns its header and claims, or why it is
    /// refused (`MalformedToken`, `UnsupportedAlgorithm`, `BadSignature`).
    public static func verify(_ jwt: String, key: P256.Signing.PublicKey) -> Result<Verified, Refusal> {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = base64URL(parts[0]), let claimBytes = base64URL(parts[1]),
            let signature = base64URL(parts[2]),
            let header = (try? JSONSerialization.jsonObject(with: headerBytes)) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: claimBytes)) as? [String: Any]
        else { return .failure(Refusal(reason: "MalformedToken")) }
        guard header["alg"] as? String == "ES256" else { return .failure(Refusal(reason: "UnsupportedAlgorithm")) }
        guard let parsed = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            key.isValidSignature(parsed, for: Data("\(parts[0]).\(parts[1])".utf8))
        else { return .failure(Refusal(reason: "BadSignature")) }
        return .success(Verified(header: header, claims: claims))
    }

    /// The `kid` of a token's header, read before its signature is checked (to pick the key to
    /// check it with).
    public static func unverifiedKeyID(_ jwt: String) -> String? {
        guard let first = jwt.split(separator: ".", omittingEmptySubsequences: false).first,
            let bytes = base64URL(first),
            let header = (try? JSONSerialization.jsonObject(with: bytes)) as? [String: Any]
        else { return nil }
        return header["kid"] as? String
    }

    /// Unpadded base64url (RFC 7515's), decoded; nil when it is not.
    public static func base64URL(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
