public import HeraldProto
import HeraldRPC

/// One push to one device, as a provider sends it: target, headers and exact body.
public struct Delivery: Sendable, Hashable {
    public var notificationID: String
    public var registrationID: String
    public var platform: Platform
    public var handle: String
    /// Lower-case header names, in a stable order.
    public var headers: [Header]
    public var body: [UInt8]
}

/// Each provider's rules for a native payload: size limit, allowed push types, and the headers that
/// go with it. Checked once per send, before any device is looked up.
public enum PlatformRules {
    /// A payload checked against its provider's rules, with the headers every delivery of it carries.
    public struct Prepared: Sendable {
        public var platform: Platform
        public var headers: [Header]
        public var body: [UInt8]
    }

    public static func prepare(_ payload: NativePayload) throws -> Prepared {
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
            return Prepared(
                platform: .apns,
                headers: [Header(name: "apns-push-type", value: type), Header(name: "apns-priority", value: String(priority)), Header(name: "content-type", value: contentType(payload, "application/json"))],
                body: payload.body)
        case .fcm:
            try limit(size, 4096, "FCM")
            return Prepared(
                platform: .fcm, headers: [Header(name: "content-type", value: contentType(payload, "application/json"))], body: payload.body)
        case .wns:
            try limit(size, 5120, "WNS")
            let type = payload.pushType.isEmpty ? "wns/toast" : payload.pushType
            guard ["wns/toast", "wns/raw", "wns/badge", "wns/tile"].contains(type) else {
                throw ServiceError.invalidArgument("WNS push_type must be wns/toast, wns/raw, wns/badge or wns/tile")
            }
            let defaultType = type == "wns/raw" ? "application/octet-stream" : "text/xml"
            return Prepared(
                platform: .wns, headers: [Header(name: "x-wns-type", value: type), Header(name: "content-type", value: contentType(payload, defaultType))],
                body: payload.body)
        case .browser:
            throw ServiceError.invalidArgument("Web Push sends are not supported yet")
        default:
            throw ServiceError.invalidArgument("every payload needs a platform")
        }
    }

    private static func limit(_ size: Int, _ max: Int, _ name: String) throws {
        guard size <= max else { throw ServiceError.invalidArgument("\(name) payload is \(size) bytes; the limit is \(max)") }
    }

    private static func contentType(_ payload: NativePayload, _ fallback: String) -> String {
        payload.contentType.isEmpty ? fallback : payload.contentType
    }
}
