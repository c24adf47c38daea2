import HeraldModel
public import HeraldProto

/// How Notification Hubs' platform headers become a push's delivery options: one rule set for a
/// direct send's HTTP headers (herald-edge) and an installation template's headers (herald-dispatch,
/// rendered with the send's properties).
///
/// NH passes `apns-push-type`, `apns-priority` (and its older `X-Apns-Priority`), `apns-expiration`
/// and `apns-collapse-id` to APNs, and `X-WNS-Type` and `X-WNS-TTL` to WNS. Herald sets `apns-id`
/// itself (one id per delivery, kept across retries) and the topic from the hub's credentials, so
/// those two are not taken. Names are matched without regard to case.
public enum NHHeaders {
    /// WNS types a send may name.
    public static let wnsTypes: Set<String> = ["wns/toast", "wns/tile", "wns/badge", "wns/raw"]

    /// Whether `value` is one NH's header `name` (lower-case) may carry; true for a name these
    /// rules do not read. A template's headers written as plain values are checked with this when
    /// the installation is written, so a value a send would refuse is refused at once.
    public static func accepts(_ name: String, _ value: String) -> Bool {
        switch name {
        case "apns-priority", "x-apns-priority": priority(value) != nil
        case "apns-expiration": TimeValue.unixSeconds(value) != nil
        case "x-wns-ttl": TimeValue.seconds(value, max: PushLimits.maxTTLSeconds) != nil
        case "x-wns-type": wnsTypes.contains(value.lowercased())
        default: true
        }
    }

    /// What ``accepts(_:_:)`` says of each header it reads, for an error message.
    public static let acceptedValues =
        "apns-priority: 5 or 10; apns-expiration: UNIX seconds 0 to \(TimeValue.maxUnixSeconds); "
        + "X-WNS-TTL: 1 to \(PushLimits.maxTTLSeconds) seconds; X-WNS-Type: wns/toast, wns/tile, wns/badge or wns/raw"

    /// APNs' two priorities.
    package static func priority(_ value: String) -> Int32? {
        // trap-ok: a String parse, nil when out of range.
        Int32(value).flatMap { $0 == 5 || $0 == 10 ? $0 : nil }
    }

    /// `header` as its caller reads them: a direct send's HTTP fields, or a template's rendered
    /// headers; given a lower-case name.
    public typealias Lookup = (String) -> String?

    /// Sets `payload`'s APNs options from `header`; `payload.body` must be set (an absent
    /// `apns-push-type` is inferred from it). Returns whether `apns-expiration` was given (a caller
    /// with another expiry to fall back on applies it only then). Throws ``ServiceError/invalidArgument(_:)``
    /// naming the header.
    @discardableResult
    public static func applyAPNs(_ header: Lookup, to payload: inout NativePayload, nowMillis: Int64) throws -> Bool {
        payload.pushType = header("apns-push-type") ?? APNsPushType.inferred(payload.body)
        if let priority = header("apns-priority") ?? header("x-apns-priority") {
            guard let value = Self.priority(priority) else {
                throw ServiceError.invalidArgument("apns-priority must be 5 or 10")
            }
            payload.priority = value
        }
        payload.collapseID = header("apns-collapse-id") ?? ""
        guard let expiration = header("apns-expiration") else { return false }
        guard let seconds = TimeValue.unixSeconds(expiration) else {
            throw ServiceError.invalidArgument(
                "apns-expiration is a UNIX time in seconds, 0 to \(TimeValue.maxUnixSeconds)")
        }
        payload.ttlSeconds = ttl(untilUnixSeconds: seconds, nowMillis: nowMillis)
        return true
    }

    /// Sets `payload`'s WNS options from `header`. Without `X-WNS-Type`, `inferredType` names it
    /// (a template's body says what it is); a direct send passes nil, and the header is required.
    public static func applyWNS(
        _ header: Lookup, to payload: inout NativePayload, inferredType: (() -> String)? = nil
    ) throws {
        guard let type = (header("x-wns-type") ?? inferredType?())?.lowercased(), wnsTypes.contains(type) else {
            throw ServiceError.invalidArgument(
                "a windows send needs X-WNS-Type: wns/toast, wns/tile, wns/badge or wns/raw")
        }
        payload.pushType = type
        if let ttl = header("x-wns-ttl") {
            guard let seconds = TimeValue.seconds(ttl, max: PushLimits.maxTTLSeconds) else {
                throw ServiceError.invalidArgument("X-WNS-TTL is a number of seconds, 1 to \(PushLimits.maxTTLSeconds)")
            }
            payload.ttlSeconds = seconds
        }
    }

    /// A W3C date (NH's `ServiceBusNotification-Apns-Expiry`, a template's `expiry`) as a TTL from
    /// `nowMillis`; nil when it is not one.
    public static func ttl(w3cDate: String, nowMillis: Int64) -> Int64? {
        NHTime.parse(w3cDate).flatMap(TimeValue.unixSeconds).map { ttl(untilUnixSeconds: $0, nowMillis: nowMillis) }
    }

    /// Seconds from `nowMillis` until `unixSeconds`, at least 1 and at most Herald's longest TTL
    /// (APNs' 0, "do not store", becomes 1: the nearest Herald can say, its 0 meaning the
    /// provider's default).
    public static func ttl(untilUnixSeconds unixSeconds: Int64, nowMillis: Int64) -> Int64 {
        TimeValue.secondsUntil(unixSeconds: unixSeconds, nowMillis: nowMillis, cap: PushLimits.maxTTLSeconds)
    }
}
