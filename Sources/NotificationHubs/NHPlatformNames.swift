import HeraldModel
public import HeraldProto

/// Notification Hubs' names for the platforms Herald sends to. NH spells a platform differently
/// in each part of its API; this is every spelling, in one place:
///
/// | platform | installation JSON `platform` | `ServiceBusNotification-Format`, telemetry | registration description |
/// |---|---|---|---|
/// | APNs | `apns` | `apple` | `AppleRegistrationDescription` |
/// | FCM v1 | `fcmv1` | `fcmv1` | `FcmV1RegistrationDescription` |
/// | WNS | `wns` | `windows` | `WindowsRegistrationDescription` |
/// | Web Push | `browser` | `browser` | `BrowserRegistrationDescription` |
///
/// The first two columns are read in any case, as NH does; a description's element names are
/// XML names, read as spelled.
public enum NHPlatformNames {
    public struct Names: Sendable {
        public let platform: Platform
        public let installation: String
        public let format: String
        /// The stem of the description's element name (`Apple` in `AppleRegistrationDescription`).
        public let description: String
    }

    public static let all: [Names] = [
        Names(platform: .apns, installation: "apns", format: "apple", description: "Apple"),
        Names(platform: .fcm, installation: "fcmv1", format: "fcmv1", description: "FcmV1"),
        Names(platform: .wns, installation: "wns", format: "windows", description: "Windows"),
        Names(platform: .browser, installation: "browser", format: "browser", description: "Browser"),
    ]

    /// The platform of an installation's `platform`, in any case; nil for any other name.
    public static func installation(_ name: String) -> Platform? {
        let lowered = name.lowercased()
        return all.first { $0.installation == lowered }?.platform
    }

    /// The platform of a `ServiceBusNotification-Format`, in any case; nil for any other (`template` included).
    public static func format(_ name: String) -> Platform? {
        let lowered = name.lowercased()
        return all.first { $0.format == lowered }?.platform
    }

    /// The platform of a description's stem, as spelled.
    public static func description(_ stem: String) -> Platform? { all.first { $0.description == stem }?.platform }

    /// `platform`'s names; nil for a platform NH does not have.
    public static func of(_ platform: Platform) -> Names? { all.first { $0.platform == platform } }
}
