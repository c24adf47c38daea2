import AsyncHTTPClient
import Foundation
import GRDB
public import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldSQL
import HeraldService
public import Logging
public import Metrics
import PostgresNIO
public import PushProviders
import Synchronization

/// One platform's push credentials: the deployment's own (settings and files, for the hub
/// `default`) or a hub's (set with `herald hubs credentials set`, stored in dispatch's database).
public enum PlatformCredentials: Sendable {
    case apns(APNsCredentials)
    case fcm(account: FCMServiceAccount, url: String, tokenURL: String?)
    case wns(clientID: String, clientSecret: String, tokenURL: String)
    case webPush(keyPEM: String, subject: String)

    public var platform: Platform {
        switch self {
        case .apns: .apns
        case .fcm: .fcm
        case .wns: .wns
        case .webPush: .browser
        }
    }

    /// Parses the credentials a SetHubCredentials request sets (or a row of ``HubCredentialStore``
    /// holds): checked by the one table of setting names, so the CLI's `NAME=VALUE` words and the
    /// RPC's fields meet the same rules and errors.
    public static func parse(_ request: SetHubCredentialsRequest) throws -> PlatformCredentials {
        let (platform, settings) = try request.namedSettings()
        return try parse(platform: platform, settings: settings)
    }

    /// Parses a hub's settings (named as ``SetHubCredentialsRequest/settingNames`` says; secrets
    /// are the files' contents); INVALID_ARGUMENT names the setting, never a secret's content.
    public static func parse(platform: Platform, settings: [String: String]) throws -> PlatformCredentials {
        var names = try SetHubCredentialsRequest.settingNames(of: platform, checking: settings)
        let certificateText = platform == .apns ? settings["certificate"] ?? "" : ""
        if !certificateText.isEmpty {
            for name in ["key", "key-id", "team-id"] where !(settings[name] ?? "").isEmpty {
                throw ServiceError.invalidArgument(
                    "apns credentials take key, key-id and team-id (token auth) or certificate (certificate auth), not both; \(name) is set"
                )
            }
            names = SetHubCredentialsRequest.apnsCertificateNames
        }
        for name in names.required where (settings[name] ?? "").isEmpty {
            throw ServiceError.invalidArgument(
                platform == .apns
                    ? "apns credentials need key, key-id, team-id and topic (token auth) or certificate (certificate auth); \(name) is missing"
                    : "\(platform.name) credentials need \(names.required.joined(separator: ", ")); \(name) is missing")
        }
        let value = { (name: String) in settings[name] ?? "" }
        switch platform {
        case .apns:
            let environment = settings["environment"] ?? "production"
            guard environment == "production" || environment == "sandbox" else {
                throw ServiceError.invalidArgument("environment must be production or sandbox")
            }
            let url =
                settings["url"] ?? (environment == "production" ? APNsCredentials.production : APNsCredentials.sandbox)
            guard !certificateText.isEmpty else {
                return .apns(
                    APNsCredentials(
                        auth: .token(keyPEM: value("key"), keyID: value("key-id"), teamID: value("team-id")),
                        topic: value("topic"), baseURL: url))
            }
            let file = try SetHubCredentialsRequest.certificateFile(base64: certificateText)
            let certificate: APNsCertificate
            do { certificate = try APNsCertificate(file: file, password: value("certificate-password")) } catch {
                throw ServiceError.invalidArgument("certificate: \(error)")
            }
            guard let topic = settings["topic"] ?? certificate.topic, !topic.isEmpty else {
                throw ServiceError.invalidArgument("the certificate names no topic (no subject UID): set topic")
            }
            return .apns(APNsCredentials(auth: .certificate(certificate), topic: topic, baseURL: url))
        case .fcm:
            let account: FCMServiceAccount
            do { account = try FCMServiceAccount(json: Array(value("service-account").utf8)) } catch {
                throw ServiceError.invalidArgument("service-account is not an FCM service account JSON file")
            }
            return .fcm(account: account, url: settings["url"] ?? FCMSender.production, tokenURL: settings["token-url"])
        case .wns:
            return .wns(
                clientID: value("client-id"),
                clientSecret: value("client-secret").trimmingCharacters(in: .whitespacesAndNewlines),
                tokenURL: settings["token-url"] ?? WNSAccessToken.production)
        default:
            let subject = value("subject")
            guard subject.hasPrefix("mailto:") || subject.hasPrefix("https://") else {
                throw ServiceError.invalidArgument("subject must be a mailto: or https: contact (RFC 8292)")
            }
            return .webPush(keyPEM: value("vapid-key"), subject: subject)
        }
    }

    /// A sender over `client`. Checks the keys (a bad one is INVALID_ARGUMENT saying which).
    public func makeSender(client: PushClient, timeout: Duration) async throws -> any PushSender {
        func checked<T>(_ problem: String, _ body: () async throws -> T) async throws -> T {
            do { return try await body() } catch { throw ServiceError.invalidArgument(problem) }
        }
        switch self {
        case .apns(let credentials):
            var token: APNsProviderToken?
            if case .token(let keyPEM, let keyID, let teamID) = credentials.auth {
                token = try await checked("the APNs key is not a P-256 private key in PEM (the .p8 file)") {
                    try await APNsProviderToken(keyPEM: keyPEM, keyID: keyID, teamID: teamID)
                }
            }
            return try await checked("the APNs url is not an https://host[:port] URL") {
                try APNsSender(credentials: credentials, client: client, token: token, timeout: timeout)
            }
        case .fcm(let account, let url, let tokenURL):
            let tokens = try await checked("the FCM service account's private_key is not an RSA private key in PEM") {
                try await FCMAccessToken.cache(
                    account: account, tokenURL: tokenURL, client: client.http, timeout: timeout)
            }
            return try await checked("the FCM url is not an https://host[:port] URL") {
                try FCMSender(
                    baseURL: url, projectID: account.projectID, client: client, tokens: tokens, timeout: timeout)
            }
        case .wns(let clientID, let clientSecret, let tokenURL):
            let tokens = WNSAccessToken.cache(
                clientID: clientID, clientSecret: clientSecret, tokenURL: tokenURL, client: client.http,
                timeout: timeout)
            return WNSSender(client: client.http, tokens: tokens, timeout: timeout)
        case .webPush(let keyPEM, let subject):
            let vapid = try await checked("the VAPID key is not a P-256 private key in PEM") {
                try await VAPID(keyPEM: keyPEM, subject: subject)
            }
            return WebPushSender(client: client.http, vapid: vapid, timeout: timeout)
        }
    }

    /// When the credentials stop working, Unix ms (an APNs certificate's end); nil if they do not end.
    public var expiresAtUnixMs: Int64? {
        guard case .apns(let credentials) = self else { return nil }
        return credentials.certificate?.notValidAfterUnixMs
    }

    /// What `herald hubs credentials show` prints: identifiers, never a secret.
    public var summary: String {
        switch self {
        case .apns(let c):
            switch c.auth {
            case .token(_, let keyID, let teamID): "key id \(keyID), team \(teamID), topic \(c.topic), \(c.baseURL)"
            case .certificate(let certificate):
                "certificate \(certificate.commonName.isEmpty ? "(no common name)" : certificate.commonName), "
                    + "topic \(c.topic), \(c.baseURL)"
            }
        case .fcm(let account, let url, _): "project \(account.projectID), \(account.clientEmail), \(url)"
        case .wns(let clientID, _, let tokenURL): "client \(clientID), \(tokenURL)"
        case .webPush(_, let subject): "VAPID subject \(subject)"
        }
    }
}

/// One platform's credentials of a hub, as ``HubCredentialStore`` holds them.
public struct StoredCredentials: Sendable {
    public var hub: String
    public var platform: Platform
    /// The request that would set them (its one platform's message), or why the row cannot be
    /// read (never a secret's content).
    public var request: Result<SetHubCredentialsRequest, ServiceError>
    public var updatedAt: Int64

    public init(
        hub: String, platform: Platform, request: Result<SetHubCredentialsRequest, ServiceError>, updatedAt: Int64
    ) {
        self.hub = hub
        self.platform = platform
        self.request = request
        self.updatedAt = updatedAt
    }
}

/// Hubs' credentials in dispatch's database, secrets included (the SQLite file is the service's
/// own, 0600; on PostgreSQL, its schema), never sent back by an RPC.
///
/// Each row holds its platform's message as SetHubCredentials carries it (`ApnsCredentials`,
/// `FcmCredentials`, `WnsCredentials` or `BrowserCredentials`, protobuf bytes in `credentials`):
/// what was set is what is read back, with no second spelling in between. Rows with named settings
/// (`settings`, a JSON object: stored before, or by an older replica during a rolling upgrade) are
/// rewritten so by ``convertNamedSettings()``, which every ``all()`` runs first; `settings` is then
/// '' and is dropped from 2027-03-01 (services/dispatch/README.md).
public struct HubCredentialStore: Sendable {
    /// The table comes with the outbox's migrations (``Outbox``); on SQLite,
    /// `db` is the outbox's own ``SQLiteDatabase``, through which every write to the file goes.
    private let db: any SQLDatabase
    /// Seals each row's message (`encryption-keys`); nil: stored as it is.
    private let box: SecretBox?

    public init(db: any SQLDatabase, box: SecretBox? = nil) {
        self.db = db
        self.box = box
    }

    /// `message` as it is stored: sealed when a keyring is set.
    func stored(_ message: [UInt8]) throws -> [UInt8] { try box?.seal(message) ?? message }

    /// Stores `request`'s credentials (exactly one platform's; INVALID_ARGUMENT otherwise) for its
    /// hub; answers their `updated_at`.
    @discardableResult
    public func set(_ request: SetHubCredentialsRequest) async throws -> Int64 {
        let (platform, message) = try Self.message(of: request)
        let bytes = try stored(message)
        let at = unixMillis()
        try await db.execute(
            """
            INSERT INTO hub_credential (hub, platform, settings, credentials, updated_at)
            VALUES (\(request.hub), \(platform.rawValue), '', \(bytes), \(at))
            ON CONFLICT (hub, platform) DO UPDATE
            SET settings = '', credentials = excluded.credentials, updated_at = excluded.updated_at
            """)
        return at
    }

    /// Deletes one platform's credentials, or all of a hub's (`platform` unspecified); returns how many.
    public func delete(hub: String, platform: Platform) async throws -> Int {
        try await db.execute(
            platform == .unspecified
                ? "DELETE FROM hub_credential WHERE hub = \(hub)"
                : "DELETE FROM hub_credential WHERE hub = \(hub) AND platform = \(platform.rawValue)")
    }

    /// Every hub's credentials. A row that cannot be read (named settings that do not parse, a
    /// platform this version does not know, bytes protobuf-c rejects) is there with why: the
    /// caller logs it and goes on, as one hub's bad row must not stop the others.
    public func all() async throws -> [StoredCredentials] {
        try await convertNamedSettings()
        let rows = try await db.query(
            "SELECT hub, platform, settings, credentials, updated_at FROM hub_credential ORDER BY hub, platform"
        ) { row -> (String, Int32, String, [UInt8]?, Int64) in
            (try row[0], try row[1], try row[2], try row[3], try row[4])
        }
        return rows.map { hub, platform, settings, bytes, updatedAt in
            let platform = Platform(rawValue: platform)
            let request: Result<SetHubCredentialsRequest, ServiceError>
            if settings.isEmpty, let bytes {
                do {
                    let message = try box?.open(bytes) ?? bytes
                    request = .success(try Self.request(hub: hub, platform: platform, message: message))
                } catch {
                    request = .failure(.failedPrecondition("stored credentials unreadable: \(error)"))
                }
            } else {
                // Named settings the conversion could not read (a message left beside them is older).
                request = .failure(.failedPrecondition("stored named settings do not parse"))
            }
            return StoredCredentials(hub: hub, platform: platform, request: request, updatedAt: updatedAt)
        }
    }

    /// Rewrites rows that hold named settings (stored before `outbox-v19`/`dispatch-v13`, or by an
    /// older replica during a rolling upgrade, which writes `settings` and leaves `credentials` as
    /// it was) as their platform's message; returns how many. A row changed meanwhile (another
    /// `updated_at`) is left to that change; settings that do not parse are left as they are, and
    /// ``all()`` lists them as unreadable, as they were not loaded before either.
    @discardableResult
    public func convertNamedSettings() async throws -> Int {
        let named = try await db.query(
            "SELECT hub, platform, settings, updated_at FROM hub_credential WHERE settings <> ''"
        ) { row -> (String, Int32, String, Int64) in (try row[0], try row[1], try row[2], try row[3]) }
        var converted = 0
        for (hub, platform, text, updatedAt) in named {
            guard
                let settings = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: String],
                let request = try? SetHubCredentialsRequest(
                    hub: hub, platform: Platform(rawValue: platform), settings: settings),
                let (_, message) = try? Self.message(of: request), let bytes = try? stored(message)
            else { continue }
            converted += try await db.execute(
                """
                UPDATE hub_credential SET credentials = \(bytes), settings = ''
                WHERE hub = \(hub) AND platform = \(platform) AND updated_at = \(updatedAt) AND settings <> ''
                """)
        }
        return converted
    }

    /// Seals every row not sealed under the keyring's current key (stored before encryption, or
    /// under a key a rotation replaced); answers how many. A row changed meanwhile (another
    /// `updated_at`) is left to that change, which sealed it anew.
    @discardableResult
    public func rewrapAll() async throws -> Int {
        guard let box else { return 0 }
        let rows = try await db.query(
            "SELECT hub, platform, credentials, updated_at FROM hub_credential WHERE settings = ''"
        ) { row -> (String, Int32, [UInt8]?, Int64) in (try row[0], try row[1], try row[2], try row[3]) }
        var rewrapped = 0
        for (hub, platform, bytes, updatedAt) in rows {
            guard let bytes, let sealed = try box.rewrap(bytes) else { continue }
            rewrapped += try await db.execute(
                """
                UPDATE hub_credential SET credentials = \(sealed)
                WHERE hub = \(hub) AND platform = \(platform) AND updated_at = \(updatedAt)
                """)
        }
        return rewrapped
    }

    /// The platform `request` sets and its message's bytes; INVALID_ARGUMENT unless exactly one.
    static func message(of request: SetHubCredentialsRequest) throws -> (Platform, [UInt8]) {
        let platform = try request.platform()
        let bytes: [UInt8]? =
            switch platform {
            case .apns: try request.apns?.serializedBytes()
            case .fcm: try request.fcm?.serializedBytes()
            case .wns: try request.wns?.serializedBytes()
            default: try request.browser?.serializedBytes()
            }
        guard let bytes else { throw ServiceError.invalidArgument("no credentials for \(platform.name)") }
        return (platform, bytes)
    }

    /// A row's message as the request that would set it.
    static func request(hub: String, platform: Platform, message: [UInt8]) throws -> SetHubCredentialsRequest {
        var request = SetHubCredentialsRequest(hub: hub)
        switch platform {
        case .apns: request.apns = try ApnsCredentials(serializedBytes: message)
        case .fcm: request.fcm = try FcmCredentials(serializedBytes: message)
        case .wns: request.wns = try WnsCredentials(serializedBytes: message)
        case .browser: request.browser = try BrowserCredentials(serializedBytes: message)
        default: throw ServiceError.invalidArgument("no credentials for platform \(platform.rawValue)")
        }
        return request
    }
}

/// Which sender delivers a hub's pushes on each platform.
///
/// The hub `default` uses the deployment's own credentials (settings and files), or the inbox.
/// Any other hub uses only its own: a send of hub A is never signed with hub B's keys. A hub with
/// no credentials for a platform gets the inbox where the deployment records that platform in the
/// inbox (development, tests), and otherwise fails its deliveries with `NoCredentials`.
public final class HubSenders: Sendable {
    public let defaults: [Platform: any PushSender]
    public let inbox: InboxProvider
    private let hubs = Mutex<[String: [Platform: Installed]]>([:])
    /// When an RPC to this replica last set or removed each `hub/platform` (see ``load(_:readSince:logger:)``).
    private let changes = Mutex<[String: ContinuousClock.Instant]>([:])
    private let client: PushClient?
    private let timeout: Duration
    /// `provider` inbox: hubs' credentials are checked and kept, and every push still goes to the inbox.
    private let recordOnly: Bool
    /// Where the certificates' ends are recorded (``CertificateExpiryGauge``).
    private let metrics: any MetricsFactory
    /// Why each hub's platform was last retried on this replica with nothing delivered (a
    /// certificate APNs refused, a service that cannot be reached), and when: the outbox keeps a
    /// send's final failures, but a push waiting for its next attempt is not one, and its cause is
    /// what an operator needs to see now. Cleared by the next share that delivers.
    private let retrying = Mutex<[HubPlatform: (reason: String, at: Int64)]>([:])

    /// A hub's sender of one platform, with what its status shows.
    private struct Installed {
        var sender: any PushSender
        var summary: String
        var updatedAt: Int64
        var expiresAt: Int64?
    }

    public init(
        defaults: [Platform: any PushSender], inbox: InboxProvider, client: PushClient?, timeout: Duration,
        recordOnly: Bool = false, metrics: any MetricsFactory = MetricsSystem.factory
    ) {
        self.defaults = defaults
        self.inbox = inbox
        self.client = client
        self.timeout = timeout
        self.recordOnly = recordOnly
        self.metrics = metrics
        if let certificate = (defaults[.apns] as? APNsSender)?.credentials.certificate {
            CertificateExpiryGauge.set(hub: Names.defaultHub, certificate, metrics)
        }
    }

    /// nil: no sender (the delivery fails with NoCredentials).
    public func sender(hub: String, platform: Platform) -> (any PushSender)? {
        if hub == Names.defaultHub { return defaults[platform] }
        if let own = hubs.withLock({ $0[hub]?[platform]?.sender }) { return own }
        return defaults[platform] is InboxProvider ? inbox : nil
    }

    /// Builds the sender (checking the keys) and puts it in place.
    public func set(hub: String, _ credentials: PlatformCredentials, updatedAt: Int64 = unixMillis()) async throws {
        install(hub: hub, credentials, try await prepare(hub: hub, credentials), updatedAt: updatedAt)
    }

    /// Builds the sender for `credentials`, checking the keys; ``install(hub:_:_:updatedAt:changedHere:)``
    /// puts it in place. Apart, so that an RPC can store the credentials between the two.
    public func prepare(hub: String, _ credentials: PlatformCredentials) async throws -> any PushSender {
        guard hub != Names.defaultHub else {
            throw ServiceError.failedPrecondition(
                "the hub default uses the deployment's own credentials (herald-dispatch's settings); set them there")
        }
        guard let client else {
            throw ServiceError(.unimplemented, "no push client: hub credentials are not served here")
        }
        let made = try await credentials.makeSender(client: client, timeout: timeout)
        return recordOnly ? inbox : made
    }

    /// Puts a prepared sender in place. `changedHere`: an RPC to this replica set it, after storing
    /// it, so a ``load(_:readSince:logger:)`` of a snapshot read before now must not undo it.
    public func install(
        hub: String, _ credentials: PlatformCredentials, _ sender: any PushSender, updatedAt: Int64,
        changedHere: Bool = false
    ) {
        hubs.withLock {
            $0[hub, default: [:]][credentials.platform] = Installed(
                sender: sender, summary: credentials.summary, updatedAt: updatedAt,
                expiresAt: credentials.expiresAtUnixMs)
        }
        if case .apns(let apns) = credentials { CertificateExpiryGauge.set(hub: hub, apns.certificate, metrics) }
        if changedHere { noteChange(hub: hub, platforms: [credentials.platform]) }
    }

    /// Brings the hubs' senders in line with `stored` (``HubCredentialStore/all()``): new or
    /// changed credentials are set, those no longer stored removed. Replicas sharing one database
    /// call it at start and then periodically, to pick up credentials set through another replica.
    /// A hub's bad credentials do not stop the other hubs' deliveries: they are logged, and that
    /// hub's pushes fail with NoCredentials.
    ///
    /// `started`: when the snapshot's read began. A hub's platform that an RPC to this replica set
    /// or removed since then is left as that RPC left it: the snapshot may predate its write, and
    /// would otherwise undo it until the next refresh (a send in between went to the wrong sender).
    public func load(_ stored: [StoredCredentials], readSince started: ContinuousClock.Instant, logger: Logger) async {
        let changedSince = changes.withLock { changes in
            changes = changes.filter { $0.value >= started }
            return Set(changes.keys)
        }
        let current = hubs.withLock { hubs in
            Set(hubs.flatMap { hub, platforms in platforms.map { "\(hub)/\($0.key.rawValue)/\($0.value.updatedAt)" } })
        }
        for credentials in stored {
            guard !current.contains("\(credentials.hub)/\(credentials.platform.rawValue)/\(credentials.updatedAt)"),
                !changedSince.contains(Self.key(credentials.hub, credentials.platform))
            else { continue }
            do {
                try await set(
                    hub: credentials.hub, try PlatformCredentials.parse(credentials.request.get()),
                    updatedAt: credentials.updatedAt)
            } catch {
                logger.error(
                    "hub credentials unusable",
                    metadata: [
                        "herald.hub": "\(credentials.hub)", "herald.platform": "\(credentials.platform.name)",
                        "herald.error": "\(error)",
                    ])
            }
        }
        let kept = Set(stored.map { Self.key($0.hub, $0.platform) }).union(changedSince)
        let removedAPNs = hubs.withLock { hubs in
            var removedAPNs: [String] = []
            for (hub, platforms) in hubs {
                for platform in platforms.keys where !kept.contains(Self.key(hub, platform)) {
                    hubs[hub]?[platform] = nil
                    if platform == .apns { removedAPNs.append(hub) }
                }
            }
            return removedAPNs
        }
        for hub in removedAPNs { CertificateExpiryGauge.set(hub: hub, nil, metrics) }
    }

    /// Reads the store and ``load(_:readSince:logger:)``s what it holds.
    public func load(from store: HubCredentialStore, logger: Logger) async throws {
        let started = ContinuousClock.now
        await load(try await store.all(), readSince: started, logger: logger)
    }

    /// Removes a hub's platform (all of them: `.unspecified`), after the store has deleted it.
    public func remove(hub: String, platform: Platform) {
        hubs.withLock { hubs in
            if platform == .unspecified { hubs[hub] = nil } else { hubs[hub]?[platform] = nil }
        }
        if platform == .unspecified || platform == .apns { CertificateExpiryGauge.set(hub: hub, nil, metrics) }
        noteChange(hub: hub, platforms: platform == .unspecified ? Platform.delivered : [platform])
    }

    /// A hub's platform, as ``load(_:readSince:logger:)`` and the change times name it.
    private static func key(_ hub: String, _ platform: Platform) -> String { "\(hub)/\(platform.rawValue)" }

    private func noteChange(hub: String, platforms: [Platform]) {
        let now = ContinuousClock.now
        changes.withLock { changes in
            for platform in platforms { changes[Self.key(hub, platform)] = now }
        }
    }

    /// Notes a share's results (one hub, one platform) for ``retried(hub:platform:)``.
    func note(hub: String, platform: Platform, _ results: [PushResult]) {
        var reason: String?
        for result in results {
            switch result {
            case .delivered:
                retrying.withLock { _ = $0.removeValue(forKey: HubPlatform(hub: hub, platform: platform)) }
                return
            case .retry(_, let why, _) where reason == nil: reason = why
            default: break
            }
        }
        guard let reason else { return }
        let at = unixMillis()
        retrying.withLock { $0[HubPlatform(hub: hub, platform: platform)] = (reason, at) }
    }

    /// Why the hub's platform was last retried with nothing delivered, and when (Unix ms); nil
    /// when its latest share delivered or none was retried.
    public func retried(hub: String, platform: Platform) -> (reason: String, at: Int64)? {
        retrying.withLock { $0[HubPlatform(hub: hub, platform: platform)] }
    }

    /// What a hub's platforms are delivered with, for GetHubCredentials.
    public func status(hub: String) -> [HubPlatformCredentials] {
        Platform.delivered.map { platform in
            if hub == Names.defaultHub {
                let inboxOnly = defaults[platform] is InboxProvider
                let certificate = (defaults[platform] as? APNsSender)?.credentials.certificate
                return HubPlatformCredentials(
                    platform: platform, source: inboxOnly ? .inbox : .deployment, summary: "",
                    expiresAtUnixMs: certificate?.notValidAfterUnixMs ?? 0)
            }
            if let own = hubs.withLock({ $0[hub]?[platform] }) {
                return HubPlatformCredentials(
                    platform: platform, source: recordOnly ? .inbox : .hub, summary: own.summary,
                    updatedAtUnixMs: own.updatedAt, expiresAtUnixMs: own.expiresAt ?? 0)
            }
            return HubPlatformCredentials(
                platform: platform, source: defaults[platform] is InboxProvider ? .inbox : .missing, summary: "")
        }
    }

    /// Platforms whose every hub records in the inbox (delivered locally, in the claim's own
    /// transaction), and the rest (claimed with a lease, each item's sender looked up by hub).
    public var split: (local: [Platform], remote: [Platform]) {
        let own = recordOnly ? [] : hubs.withLock { Set($0.values.flatMap(\.keys)) }
        var local: [Platform] = []
        var remote: [Platform] = []
        for platform in Platform.delivered {
            if defaults[platform] is InboxProvider, !own.contains(platform) {
                local.append(platform)
            } else {
                remote.append(platform)
            }
        }
        return (local, remote)
    }
}

/// `herald_tls_certificate_expiry_timestamp_seconds{use="apns",hub}`: when a hub's APNs
/// certificate ends (Unix seconds), beside the RPC and HTTP certificates' series, so the same
/// alert rules (`HeraldCertificateExpiry`, `HeraldCertificateExpired`) cover it. Set when a
/// certificate is put in place (at start, by an RPC, or by a refresh from the store) and removed
/// when the hub's APNs credentials are deleted or replaced by a token key.
enum CertificateExpiryGauge {
    static func set(hub: String, _ certificate: APNsCertificate?, _ factory: any MetricsFactory) {
        let gauge = Gauge(
            label: CertificateExpiry.label, dimensions: [("use", "apns"), ("hub", hub)], factory: factory)
        if let certificate { gauge.record(Double(certificate.notValidAfter)) } else { gauge.destroy() }
    }
}
