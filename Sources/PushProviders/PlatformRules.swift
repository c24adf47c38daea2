import Foundation
import HeraldModel
public import HeraldProto

/// Each provider's rules for a native payload: size limit, allowed push types, and the headers that
/// go with it. Checked once per send, before any device is looked up.
public enum PlatformRules {
    /// Web Push's largest plaintext: one 4096-byte aes128gcm record less its 86-byte header, the
    /// 16-byte tag and the padding delimiter (RFC 8291 §4).
    public static let webPushMaxPlaintext = 4096 - 86 - 16 - 1

    /// Checks `payload` against its provider's rules and returns it with the delivery options every
    /// delivery of it carries, defaults resolved. `sentAt` (Unix ms) anchors `ttl_seconds`.
    public static func prepare(_ payload: NativePayload, sentAt: Int64 = unixMillis()) throws -> OutboxPayload {
        var options = try resolve(payload)
        guard payload.ttlSeconds >= 0, payload.ttlSeconds <= PushLimits.maxTTLSeconds else {
            throw ServiceError.invalidArgument(
                "ttl_seconds must be between 0 and \(PushLimits.maxTTLSeconds) (28 days)")
        }
        let collapse = payload.collapseID
        switch payload.platform {
        case .apns:
            guard collapse.utf8.count <= 64 else {
                throw ServiceError.invalidArgument("an APNs collapse id is at most 64 bytes")
            }
        case .browser:
            guard collapse.utf8.count <= 32, collapse.utf8.allSatisfy({ Self.isBase64URL($0) }) else {
                throw ServiceError.invalidArgument("a Web Push topic is at most 32 URL-safe base64 characters")
            }
        default:
            guard collapse.utf8.count <= 128 else {
                throw ServiceError.invalidArgument("collapse_id is at most 128 bytes")
            }
        }
        options.expiresAtUnixMs = payload.ttlSeconds == 0 ? 0 : sentAt + payload.ttlSeconds * 1000
        options.collapseID = collapse
        return OutboxPayload(platform: payload.platform, options: options, body: payload.body)
    }

    private static func isBase64URL(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default: false
        }
    }

    /// The push type, priority and content type, with each platform's defaults.
    private static func resolve(_ payload: NativePayload) throws -> DeliveryOptions {
        let size = payload.body.count
        switch payload.platform {
        case .apns:
            try limit(size, 4096, "APNs")
            let type = payload.pushType.isEmpty ? "alert" : payload.pushType
            guard type == "alert" || type == "background" else {
                throw ServiceError.invalidArgument("APNs push_type must be alert or background, not \"\(type)\"")
            }
            // Apple requires priority 5 for background pushes and throttles 10.
            let priority = payload.priority == 0 ? (type == "background" ? 5 : 10) : payload.priority
            guard priority == 5 || priority == 10, !(type == "background" && priority == 10) else {
                throw ServiceError.invalidArgument("APNs priority must be 10 or 5, and 5 for background pushes")
            }
            return DeliveryOptions(
                pushType: type, priority: priority, contentType: contentType(payload, "application/json"))
        case .fcm:
            try limit(size, 4096, "FCM")
            // The body is an FCM v1 message without its target ({"data":…} and/or {"notification":…}):
            // the sender adds the token.
            guard let object = try? JSONSerialization.jsonObject(with: Data(payload.body)) as? [String: Any] else {
                throw ServiceError.invalidArgument(
                    "an FCM payload is a JSON object (an FCM v1 message without \"token\")")
            }
            guard object["token"] == nil, object["topic"] == nil, object["condition"] == nil else {
                throw ServiceError.invalidArgument(
                    "an FCM payload must not name its target (token, topic or condition)")
            }
            return DeliveryOptions(contentType: contentType(payload, "application/json"))
        case .wns:
            try limit(size, 5120, "WNS")
            let type = payload.pushType.isEmpty ? "wns/toast" : payload.pushType
            guard ["wns/toast", "wns/raw", "wns/badge", "wns/tile"].contains(type) else {
                throw ServiceError.invalidArgument("WNS push_type must be wns/toast, wns/raw, wns/badge or wns/tile")
            }
            let defaultType = type == "wns/raw" ? "application/octet-stream" : "text/xml"
            return DeliveryOptions(pushType: type, contentType: contentType(payload, defaultType))
        case .browser:
            // The body is the plaintext; each delivery encrypts it for its subscription (aes128gcm).
            try limit(size, webPushMaxPlaintext, "Web Push")
            let priority = payload.priority == 0 ? 10 : payload.priority
            guard WebPushSender.urgency(priority) != nil else {
                throw ServiceError.invalidArgument("Web Push priority is 10 (high), 5 (normal) or 1 (low)")
            }
            return DeliveryOptions(priority: priority)
        default:
            throw ServiceError.invalidArgument("every payload needs a platform")
        }
    }

    private static func limit(_ size: Int, _ max: Int, _ name: String) throws {
        guard size <= max else {
            throw ServiceError.invalidArgument("\(name) payload is \(size) bytes; the limit is \(max)")
        }
    }

    private static func contentType(_ payload: NativePayload, _ fallback: String) -> String {
        payload.contentType.isEmpty ? fallback : payload.contentType
    }
}
