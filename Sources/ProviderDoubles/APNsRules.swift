public import Crypto
import Foundation

/// What APNs holds a push to, over token-based auth: the rules the tests' push double
/// (StackTestSupport's `ProviderFixture`) and herald-bench's APNs double both answer by, written
/// once. Each check returns nil when the request passes, or the status and `reason` APNs answers
/// (Apple's "Handling notification responses from APNs").
///
/// The checks are split by cost: a double verifies a provider token's signature once and keeps
/// the result (APNs too verifies a connection's token once, then compares), and checks the rest on
/// every request.
public enum APNsRules {
    /// The largest payload APNs takes (4 KB; VoIP pushes may be 5 KB, which Herald does not send).
    public static let maxPayloadBytes = 4096

    /// An answer other than 200: APNs' status and the `reason` of its JSON body.
    public struct Refusal: Error, Equatable, Sendable {
        public var status: Int
        public var reason: String

        public init(_ status: Int, _ reason: String) {
            self.status = status
            self.reason = reason
        }
    }

    /// The credentials a push must come with: a provider token signed by `key` that names `keyID`
    /// (`kid`) and `teamID` (`iss`), and `topic` (the app's bundle id) as `apns-topic`.
    public struct Provider: Sendable {
        public var key: P256.Signing.PublicKey
        public var keyID: String
        public var teamID: String
        public var topic: String

        public init(key: P256.Signing.PublicKey, keyID: String, teamID: String, topic: String) {
            self.key = key
            self.keyID = keyID
            self.teamID = teamID
            self.topic = topic
        }
    }

    /// What a provider token says once its signature is verified: what a double keeps.
    public struct ProviderToken: Sendable, Equatable {
        public var keyID: String?
        public var teamID: String?
        /// `iat`, Unix seconds.
        public var issuedAt: Double?
    }

    /// The device token of `path` (`/3/device/<64 hex digits>`), or 400 `BadDeviceToken`.
    public static func deviceToken(path: String) -> Result<Substring, Refusal> {
        let prefix = "/3/device/"
        guard path.hasPrefix(prefix) else { return .failure(Refusal(400, "BadDeviceToken")) }
        let token = path.dropFirst(prefix.count)
        guard token.utf8.count == 64, token.utf8.allSatisfy(isHexDigit) else {
            return .failure(Refusal(400, "BadDeviceToken"))
        }
        return .success(token)
    }

    /// The token of an `authorization: bearer <token>` header, or 403 `MissingProviderToken`.
    public static func providerToken(authorization: String?) -> Result<Substring, Refusal> {
        guard let authorization, authorization.hasPrefix("bearer ") else {
            return .failure(Refusal(403, "MissingProviderToken"))
        }
        return .success(authorization.dropFirst("bearer ".count))
    }

    /// Verifies a provider token's ES256 signature with `key` (the costly part), or 403
    /// `InvalidProviderToken`.
    public static func verify(providerToken jwt: String, key: P256.Signing.PublicKey) -> Result<
        ProviderToken, Refusal
    > {
        switch ES256JWT.verify(jwt, key: key) {
        case .failure: return .failure(Refusal(403, "InvalidProviderToken"))
        case .success(let verified):
            return .success(
                ProviderToken(
                    keyID: verified.header["kid"] as? String, teamID: verified.claims["iss"] as? String,
                    issuedAt: (verified.claims["iat"] as? NSNumber)?.doubleValue))
        }
    }

    /// A verified token's claims against the provider: 403 `InvalidProviderToken` for another key
    /// id or team, 403 `ExpiredProviderToken` once it is an hour old (`now`: Unix seconds).
    public static func check(_ token: ProviderToken, for provider: Provider, now: Double) -> Refusal? {
        guard token.keyID == provider.keyID, token.teamID == provider.teamID else {
            return Refusal(403, "InvalidProviderToken")
        }
        guard let issuedAt = token.issuedAt, abs(now - issuedAt) < 3600 else {
            return Refusal(403, "ExpiredProviderToken")
        }
        return nil
    }

    /// A push's headers: `apns-topic` the provider's (400 `BadTopic`), `apns-push-type` alert or
    /// background (400 `InvalidPushType`), `apns-priority` 10 or 5, and 5 for a background push
    /// (400 `BadPriority`), `apns-id` a UUID (400 `BadMessageId`).
    public static func checkHeaders(
        topic: String?, pushType: String?, priority: String?, apnsID: String?, for provider: Provider
    ) -> Refusal? {
        guard topic == provider.topic else { return Refusal(400, "BadTopic") }
        guard pushType == "alert" || pushType == "background" else { return Refusal(400, "InvalidPushType") }
        guard priority == "10" || priority == "5", !(pushType == "background" && priority != "5") else {
            return Refusal(400, "BadPriority")
        }
        guard let apnsID, isUUID(apnsID) else { return Refusal(400, "BadMessageId") }
        return nil
    }

    /// A payload's size: 413 `PayloadTooLarge` over ``maxPayloadBytes``.
    public static func checkPayloadSize(_ count: Int) -> Refusal? {
        count > maxPayloadBytes ? Refusal(413, "PayloadTooLarge") : nil
    }

    /// A payload: its size, and a JSON object with `aps` (400 `PayloadEmpty` otherwise).
    public static func checkPayload(_ body: [UInt8]) -> Refusal? {
        if let refusal = checkPayloadSize(body.count) { return refusal }
        guard let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any], json["aps"] != nil
        else { return Refusal(400, "PayloadEmpty") }
        return nil
    }

    /// 8-4-4-4-12 hex digits, either case: a UUID's canonical text, checked in place. (Not
    /// Foundation's `UUID(uuidString:)`, which on Linux also reads a space or a dash for a digit.)
    static func isUUID(_ text: String) -> Bool {
        var at = 0
        for byte in text.utf8 {
            let dash = at == 8 || at == 13 || at == 18 || at == 23
            guard dash ? byte == UInt8(ascii: "-") : isHexDigit(byte) else { return false }
            at += 1
        }
        return at == 36
    }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            true
        default: false
        }
    }
}
