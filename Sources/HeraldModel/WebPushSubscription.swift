import Foundation

/// A browser's PushSubscription (`subscription.toJSON()`), the handle of a `browser`
/// registration: where to POST (RFC 8030) and the keys to encrypt for (RFC 8291).
public struct WebPushSubscription: Sendable, Equatable {
    public var endpoint: URL
    /// The browser's P-256 ECDH public key, uncompressed (65 bytes).
    public var p256dh: [UInt8]
    /// The authentication secret (16 bytes).
    public var auth: [UInt8]

    private struct JSON: Decodable {
        struct Keys: Decodable {
            var p256dh: String
            var auth: String
        }
        var endpoint: String
        var keys: Keys
    }

    public init(handle: String) throws {
        let invalid = ServiceError.invalidArgument(
            #"a browser handle is the PushSubscription JSON: {"endpoint":"https://…","keys":{"p256dh":"…","auth":"…"}}"#
        )
        guard handle.utf8.count <= 4096, let json = try? JSONDecoder().decode(JSON.self, from: Data(handle.utf8)) else {
            throw invalid
        }
        guard json.endpoint.utf8.count <= 2048, URLRules.isVisibleASCII(json.endpoint),
            let url = URL(string: json.endpoint),
            url.scheme == "https", url.host != nil
        else {
            throw ServiceError.invalidArgument("a Web Push endpoint is an https URL of at most 2048 bytes")
        }
        guard let p256dh = Base64URL.decode(json.keys.p256dh), p256dh.count == 65, p256dh.first == 4 else {
            throw ServiceError.invalidArgument(
                "keys.p256dh must be an uncompressed P-256 point in URL-safe base64 (65 bytes)")
        }
        guard let auth = Base64URL.decode(json.keys.auth), auth.count == 16 else {
            throw ServiceError.invalidArgument("keys.auth must be 16 bytes in URL-safe base64")
        }
        self.endpoint = url
        self.p256dh = p256dh
        self.auth = auth
    }
}

/// Rules for URLs that devices hand Herald and that dispatch later sends to.
public enum URLRules {
    /// Only visible ASCII (0x21–0x7E): no spaces, no CR/LF or other control bytes, no NUL. A URL
    /// becomes an HTTP request line and headers in dispatch, and Foundation's `URL(string:)` on
    /// Linux accepts some control characters, so they are refused before parsing.
    public static func isVisibleASCII(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f }
    }
}
