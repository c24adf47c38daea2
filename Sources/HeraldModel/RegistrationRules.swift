import Foundation
public import HeraldProto

/// What a registration may contain. Closes the tutorial's hole where a device could add the tag
/// `username:victim` and receive the victim's pushes.
public enum RegistrationRules {
    public static let maxTags = 60
    public static let maxTagLength = 120
    /// Prefixes only the server may put on a registration.
    public static let reservedTagPrefixes = ["username:", "$"]

    /// Checks client tags and returns them without duplicates, in first-seen order. With
    /// `allowUserTags`, `username:` tags pass (a back end holding a hub's Manage key tags its users'
    /// devices, as the tutorial's AppBackend does through NH's registrations); `$` never does.
    public static func validateTags(_ tags: [String], allowUserTags: Bool = false) throws -> [String] {
        guard tags.count <= maxTags else {
            throw ServiceError.invalidArgument("at most \(maxTags) tags are allowed, got \(tags.count)")
        }
        var seen = Set<String>()
        var unique: [String] = []
        for tag in tags {
            guard Names.isValidTag(tag, maxLength: maxTagLength) else {
                throw ServiceError.invalidArgument(
                    "tag \"\(tag.prefix(130))\" is invalid: tags are 1 to \(maxTagLength) characters of A-Z a-z 0-9 _ @ # . : -"
                )
            }
            if let prefix = reservedTagPrefixes.first(where: { tag.hasPrefix($0) }),
                !(allowUserTags && prefix == "username:")
            {
                throw ServiceError.invalidArgument("tag \"\(tag)\" uses the reserved prefix \"\(prefix)\"")
            }
            if seen.insert(tag).inserted { unique.append(tag) }
        }
        return unique
    }

    /// Where device-supplied URLs may point: dispatch POSTs to them, so a URL elsewhere would hand
    /// Herald's WNS token to whoever runs the host, or aim dispatch at an internal address. Each
    /// entry matches the host and its subdomains.
    public struct PushHosts: Sendable {
        /// WNS channel URIs: Microsoft's notification hosts.
        public static let defaultWNS = ["notify.windows.com"]
        /// Web Push endpoints: the browsers' push services (Chrome and other Chromium browsers,
        /// Firefox, Edge, Safari).
        public static let defaultWebPush = [
            "fcm.googleapis.com", "push.services.mozilla.com", "notify.windows.com", "push.apple.com",
        ]
        public var wns: [String]
        public var webPush: [String]

        public init(wns: [String] = defaultWNS, webPush: [String] = defaultWebPush) {
            self.wns = wns
            self.webPush = webPush
        }

        static func matches(_ url: URL, _ hosts: [String]) -> Bool {
            guard url.scheme == "https", let host = url.host?.lowercased() else { return false }
            return hosts.contains { host == $0 || host.hasSuffix("." + $0) }
        }
    }

    /// Checks a push handle for its platform; WNS channel URIs and Web Push endpoints must be https
    /// on one of `hosts`.
    public static func validateHandle(_ handle: String, platform: Platform, hosts: PushHosts = PushHosts()) throws {
        switch platform {
        case .apns:
            // Device tokens are hex; 32 bytes today, up to 100 bytes allowed for the future.
            guard (64...200).contains(handle.utf8.count), handle.utf8.count % 2 == 0,
                handle.utf8.allSatisfy({ $0.isHexDigit })
            else {
                throw ServiceError.invalidArgument("an APNs handle is a device token of 64 to 200 hex digits")
            }
        case .fcm:
            guard (1...4096).contains(handle.utf8.count),
                handle.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f })
            else {
                throw ServiceError.invalidArgument(
                    "an FCM handle is a registration token of 1 to 4096 printable characters")
            }
        case .wns:
            guard handle.utf8.count <= 2048, URLRules.isVisibleASCII(handle), let url = URL(string: handle),
                PushHosts.matches(url, hosts.wns)
            else {
                throw ServiceError.invalidArgument(
                    "a WNS handle is an https channel URI on \(hosts.wns.map { "*.\($0)" }.joined(separator: ", "))")
            }
        case .browser:
            let subscription = try WebPushSubscription(handle: handle)
            guard PushHosts.matches(subscription.endpoint, hosts.webPush) else {
                throw ServiceError.invalidArgument(
                    "a Web Push endpoint must be on a browser's push service: \(hosts.webPush.map { "*.\($0)" }.joined(separator: ", "))"
                )
            }
        default:
            throw ServiceError.invalidArgument("platform must be set (apns, fcm, wns or browser)")
        }
    }

    /// The tag the server puts on every registration of `owner` (``Names/userTag(_:)``).
    public static func userTag(_ owner: String) -> String { Names.userTag(owner) }

    /// A hub holding `count` of what it may hold `limit` of (installations, NH registrations) takes
    /// one more only below the limit; a limit of 0 is none.
    package static func checkRoom(count: Int64, limit: Int64, of what: String, hub: String) throws {
        guard limit > 0, count >= limit else { return }
        throw ServiceError(
            .resourceExhausted, "hub \(hub) holds its limit of \(limit) \(what) (herald hubs limits \(hub))")
    }

    /// NH's `pushChannelExpired` after a write: it is read-only, so it stays while the channel
    /// stays (push-service feedback set it) and clears when the channel changes.
    package static func channelExpired(stored: (channel: String, expired: Bool)?, writing channel: String) -> Bool {
        guard let stored else { return false }
        return stored.channel == channel && stored.expired
    }
}

extension UInt8 {
    fileprivate var isHexDigit: Bool {
        switch self {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            true
        default: false
        }
    }
}
