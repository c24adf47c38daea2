import Foundation
public import HeraldProto

/// A hub's push credentials as named settings, and the typed request that carries them.
///
/// The CLI takes credentials as `NAME=VALUE` words and herald-dispatch keeps them as named settings
/// (JSON in its `hub_credential` table); SetHubCredentials carries them typed, one message per
/// platform. This is the one table between the names and the fields. Every setting is text: the
/// APNs `certificate` (a binary .p12) is its file in base64, as NH's management API takes it.
extension SetHubCredentialsRequest {
    /// Each platform's setting names: the required ones, then the optional ones.
    public static let settingNames: [Platform: (required: [String], optional: [String])] = [
        // Token auth; certificate auth instead takes `certificate` (see ``apnsCertificateNames``).
        .apns: (["key", "key-id", "team-id", "topic"], ["environment", "url", "certificate", "certificate-password"]),
        .fcm: (["service-account"], ["url", "token-url"]),
        .wns: (["client-id", "client-secret"], ["token-url"]),
        .browser: (["vapid-key", "subject"], []),
    ]

    /// The APNs settings of certificate-based auth: the required one, and those it takes besides
    /// `environment` and `url` (the topic defaults to the certificate's).
    public static let apnsCertificateNames = (required: ["certificate"], optional: ["certificate-password", "topic"])

    /// The APNs `certificate` setting's file: the setting is the file in base64 (empty: none).
    /// INVALID_ARGUMENT for text that is not base64.
    public static func certificateFile(base64 text: String) throws -> [UInt8] {
        guard let data = Data(base64Encoded: text, options: .ignoreUnknownCharacters) else {
            throw ServiceError.invalidArgument("certificate must be the .p12 or PEM file in base64")
        }
        return Array(data)
    }

    /// The platform a hub's credentials are set for, by the name the CLI and `/v1/hubs` take
    /// (apns, fcm or fcmv1, wns, browser or webpush; any case); nil for another.
    public static func platform(named name: String) -> Platform? {
        switch name.lowercased() {
        case "apns": .apns
        case "fcm", "fcmv1": .fcm
        case "wns": .wns
        case "browser", "webpush": .browser
        default: nil
        }
    }

    /// `platform`'s setting names, once every name in `settings` is one of them: INVALID_ARGUMENT
    /// for a platform without credentials, and for an unknown setting (naming it, never a value).
    public static func settingNames(of platform: Platform, checking settings: [String: String]) throws -> (
        required: [String], optional: [String]
    ) {
        guard let names = settingNames[platform] else {
            throw ServiceError.invalidArgument("platform must be apns, fcm, wns or browser")
        }
        for name in settings.keys.sorted() where !names.required.contains(name) && !names.optional.contains(name) {
            throw ServiceError.invalidArgument(
                "unknown \(platform.name) setting \(name): use \((names.required + names.optional).joined(separator: ", "))"
            )
        }
        return names
    }

    /// The request setting `platform`'s credentials from named settings. INVALID_ARGUMENT names an
    /// unknown setting (whether the required ones are there is herald-dispatch's check, as for a
    /// request from any other client).
    public init(hub: String, platform: Platform, settings: [String: String]) throws {
        _ = try Self.settingNames(of: platform, checking: settings)
        let value = { (name: String) in settings[name] ?? "" }
        self.init(hub: hub)
        switch platform {
        case .apns:
            let certificate = try settings["certificate"].map(Self.certificateFile(base64:)) ?? []
            apns = ApnsCredentials(
                key: value("key"), keyID: value("key-id"), teamID: value("team-id"), topic: value("topic"),
                environment: value("environment"), url: value("url"), certificate: certificate,
                certificatePassword: value("certificate-password"))
        case .fcm:
            fcm = FcmCredentials(
                serviceAccount: value("service-account"), url: value("url"), tokenUrl: value("token-url"))
        case .wns:
            wns = WnsCredentials(
                clientID: value("client-id"), clientSecret: value("client-secret"), tokenUrl: value("token-url"))
        default:
            browser = BrowserCredentials(vapidKey: value("vapid-key"), subject: value("subject"))
        }
    }

    /// The one platform whose credentials the request sets; INVALID_ARGUMENT unless exactly one.
    public func platform() throws -> Platform {
        let set = [(apns != nil, Platform.apns), (fcm != nil, .fcm), (wns != nil, .wns), (browser != nil, .browser)]
            .filter(\.0)
        guard set.count == 1, let (_, platform) = set.first else {
            throw ServiceError.invalidArgument(
                "set exactly one platform's credentials (apns, fcm, wns or browser); \(set.count) are set")
        }
        return platform
    }

    /// The platform whose credentials the request sets, and them as named settings (empty fields
    /// left out). INVALID_ARGUMENT unless exactly one platform's credentials are set.
    public func namedSettings() throws -> (platform: Platform, settings: [String: String]) {
        let platform = try platform()
        let fields: [(String, String)]
        if let apns {
            fields = [
                ("key", apns.key), ("key-id", apns.keyID), ("team-id", apns.teamID), ("topic", apns.topic),
                ("environment", apns.environment), ("url", apns.url),
                ("certificate", Data(apns.certificate).base64EncodedString()),
                ("certificate-password", apns.certificatePassword),
            ]
        } else if let fcm {
            fields = [("service-account", fcm.serviceAccount), ("url", fcm.url), ("token-url", fcm.tokenUrl)]
        } else if let wns {
            fields = [("client-id", wns.clientID), ("client-secret", wns.clientSecret), ("token-url", wns.tokenUrl)]
        } else if let browser {
            fields = [("vapid-key", browser.vapidKey), ("subject", browser.subject)]
        } else {
            fields = []
        }
        return (platform, Dictionary(uniqueKeysWithValues: fields.filter { !$0.1.isEmpty }))
    }
}

extension CredentialSource {
    /// What delivers a platform, in one word (the CLI's and `/v1/hubs`' answers): hub,
    /// deployment, inbox or missing.
    public var word: String {
        switch self {
        case .hub: "hub"
        case .deployment: "deployment"
        case .inbox: "inbox"
        default: "missing"
        }
    }
}
