import AsyncHTTPClient
import Foundation
import GRDB
public import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
public import PushProviders
import ServiceLifecycle

/// Settings of herald-dispatch, besides ``RuntimeConfig``'s (environment variable `HERALD_<KEY>`).
///
/// Delivery:
/// - `provider` (`auto`): `auto` sends each platform through its real push service when that
///   platform's credentials are set, and records the others in the inbox; `inbox` records everything.
/// - `retry-window-seconds` (1800): a delivery still failing this long after its send is abandoned.
/// - `retry-base-ms` (1000), `retry-max-ms` (300000): backoff before the 2nd attempt, doubled for
///   each further one up to the maximum, with jitter, and never sooner than `Retry-After`.
/// - `push-timeout-ms` (30000): one request to a push service. `push-ca-file`: a PEM bundle trusted
///   besides the system roots (tests, TLS-inspecting proxies).
/// - `delivery-batch` (500), `delivery-workers` (4): deliveries claimed per batch, batches in flight.
/// - `audience-memory-rows` (20000): devices of one send held in memory while its audience streams
///   in; beyond, they go to the outbox's staging table in chunks of this size (see `Outbox.stage`),
///   so a send of a million devices takes no more memory than one of 20,000.
/// - `retention-seconds` (604800, 7 days): finished sends (outcome, deliveries) and inbox entries
///   older than this are deleted, hourly.
/// - `max-scheduled-per-hub` (1000): scheduled sends one hub may have waiting; the next is refused
///   with RESOURCE_EXHAUSTED (429) until one is made or cancelled. Each keeps its request (up to
///   64 KB of body) until it fires, so the bound is what a Send key can make dispatch store.
///
/// Leases, and replicas (with `database-url postgres://…`; see ``Outbox``):
/// - `lease-seconds` (90, at least 3): how long a claim holds its deliveries before another replica
///   (or, on SQLite, the same process) may take them over. A live replica renews the leases of its
///   batches in flight every sixth of it (one small row per batch), so only a replica that died or
///   stalled that long loses them; a shorter lease hands a dead replica's work over sooner, at the
///   cost of a renewal query per sixth.
/// - `replica-id` (host name and runtime folder): this replica's name on its leases. Stable across
///   its restarts, so a restarted replica takes its own leases back at once; distinct from every
///   other replica's, or one's restart takes over the other's live work (sent twice, counted once).
/// - `credentials-refresh-seconds` (5): how often hubs' credentials set through another replica
///   are read back.
///
/// Credentials (secrets only ever from files, never on the command line):
/// - APNs: `apns-key-file` (.p8), `apns-key-id`, `apns-team-id`, `apns-topic` (bundle id),
///   `apns-environment` (`production` or `sandbox`), `apns-url` (overrides the environment's URL);
///   or, for certificate-based auth instead of the key, `apns-certificate-file` (.p12, or PEM with
///   the certificate and its key) and `apns-certificate-password-file` (the topic defaults to the
///   certificate's).
/// - FCM: `fcm-service-account-file` (service-account JSON), `fcm-url`, `fcm-token-url` (override the
///   production URL and the account's `token_uri`).
/// - WNS: `wns-client-id` (package SID), `wns-client-secret-file`, `wns-token-url`.
/// - Web Push: `webpush-vapid-key-file` (P-256 private key, PEM), `webpush-subject` (`mailto:` or https URL).
public struct DispatchConfig: Sendable {
    public enum Provider: String, CaseIterable, Sendable { case auto, inbox }
    public enum APNsEnvironment: String, CaseIterable, Sendable { case production, sandbox }
    public static let keys: Set<String> = [
        "provider", "retry-window-seconds", "retry-base-ms", "retry-max-ms", "push-timeout-ms", "push-ca-file",
        "delivery-batch", "delivery-workers", "retention-seconds", "audience-memory-rows", "lease-seconds",
        "replica-id",
        "credentials-refresh-seconds", "max-scheduled-per-hub",
        "apns-key-file", "apns-key-id", "apns-team-id", "apns-topic", "apns-environment", "apns-url",
        "apns-certificate-file", "apns-certificate-password-file",
        "fcm-service-account-file", "fcm-url", "fcm-token-url",
        "wns-client-id", "wns-client-secret-file", "wns-token-url",
        "webpush-vapid-key-file", "webpush-subject",
    ]
    public var provider: Provider
    public var retryWindow: Duration
    public var retryPolicy: RetryPolicy
    public var pushTimeout: Duration
    public var pushCAFile: String?
    public var batchSize: Int
    public var workers: Int
    public var retention: Duration
    public var audienceMemoryRows: Int
    public var maxScheduledPerHub: Int
    public static let defaultMaxScheduledPerHub = 1000
    public var lease: Duration
    public var replicaID: String?
    public var credentialsRefresh: Duration
    public var apns: APNsCredentials?
    public var fcm: (account: FCMServiceAccount, url: String, tokenURL: String?)?
    public var wns: (clientID: String, clientSecret: String, tokenURL: String)?
    public var webPush: (keyPEM: String, subject: String)?

    public init(reader: ConfigReader) throws {
        provider = try reader.choice("provider", default: .auto)
        let window = try reader.int("retry-window-seconds", default: 1800)
        let base = try reader.int("retry-base-ms", default: 1000)
        let cap = try reader.int("retry-max-ms", default: 300_000)
        let timeout = try reader.int("push-timeout-ms", default: 30_000)
        batchSize = try reader.int("delivery-batch", default: 500)
        workers = try reader.int("delivery-workers", default: 4)
        audienceMemoryRows = try reader.int("audience-memory-rows", default: Outbox.StagedAudience.spillThreshold)
        guard (1...10_000_000).contains(audienceMemoryRows) else {
            throw ConfigError("audience-memory-rows must be 1...10000000")
        }
        maxScheduledPerHub = try reader.int("max-scheduled-per-hub", default: Self.defaultMaxScheduledPerHub)
        guard (1...10_000_000).contains(maxScheduledPerHub) else {
            throw ConfigError("max-scheduled-per-hub must be 1...10000000")
        }
        let retentionSeconds = try reader.int("retention-seconds", default: 7 * 86400)
        guard retentionSeconds > 0 else { throw ConfigError("retention-seconds must be positive") }
        retention = .seconds(retentionSeconds)
        guard window > 0, base > 0, cap >= base, timeout > 0, batchSize > 0, workers > 0 else {
            throw ConfigError(
                "retry-window-seconds, retry-base-ms, push-timeout-ms, delivery-batch and delivery-workers must be positive, and retry-max-ms at least retry-base-ms"
            )
        }
        retryWindow = .seconds(window)
        retryPolicy = RetryPolicy(base: .milliseconds(base), cap: .milliseconds(cap))
        pushTimeout = .milliseconds(timeout)
        let leaseSeconds = try reader.int("lease-seconds", default: 90)
        guard (3...86400).contains(leaseSeconds) else { throw ConfigError("lease-seconds must be 3...86400") }
        lease = .seconds(leaseSeconds)
        replicaID = reader.string("replica-id")
        let refresh = try reader.int("credentials-refresh-seconds", default: 5)
        guard refresh > 0 else { throw ConfigError("credentials-refresh-seconds must be positive") }
        credentialsRefresh = .seconds(refresh)
        pushCAFile = reader.string("push-ca-file")

        let environment: APNsEnvironment = try reader.choice("apns-environment", default: .production)
        let apnsURL =
            reader.string("apns-url")
            ?? (environment == .production ? APNsCredentials.production : APNsCredentials.sandbox)
        if let keyFile = reader.string("apns-key-file") {
            guard reader.string("apns-certificate-file") == nil else {
                throw ConfigError(
                    "set apns-key-file (token auth) or apns-certificate-file (certificate auth), not both")
            }
            guard let keyID = reader.string("apns-key-id"), let teamID = reader.string("apns-team-id"),
                let topic = reader.string("apns-topic")
            else { throw ConfigError("apns-key-file needs apns-key-id, apns-team-id and apns-topic") }
            apns = APNsCredentials(
                auth: .token(keyPEM: try Self.secret(keyFile, "apns-key-file"), keyID: keyID, teamID: teamID),
                topic: topic, baseURL: apnsURL)
        } else if let certificateFile = reader.string("apns-certificate-file") {
            guard let file = FileManager.default.contents(atPath: certificateFile) else {
                throw ConfigError("apns-certificate-file: cannot read \(certificateFile)")
            }
            let password = try reader.string("apns-certificate-password-file").map {
                try Self.secret($0, "apns-certificate-password-file").trimmingCharacters(in: .newlines)
            }
            let certificate: APNsCertificate
            do { certificate = try APNsCertificate(file: Array(file), password: password ?? "") } catch {
                throw ConfigError("apns-certificate-file: \(error)")
            }
            guard let topic = reader.string("apns-topic") ?? certificate.topic else {
                throw ConfigError("apns-certificate-file's certificate names no topic (no subject UID): set apns-topic")
            }
            apns = APNsCredentials(auth: .certificate(certificate), topic: topic, baseURL: apnsURL)
        }
        if let accountFile = reader.string("fcm-service-account-file") {
            let account = try FCMServiceAccount(
                json: Array(try Self.secret(accountFile, "fcm-service-account-file").utf8))
            fcm = (account, reader.string("fcm-url") ?? FCMSender.production, reader.string("fcm-token-url"))
        }
        if let clientID = reader.string("wns-client-id") {
            guard let secretFile = reader.string("wns-client-secret-file") else {
                throw ConfigError("wns-client-id needs wns-client-secret-file")
            }
            let secret = try Self.secret(secretFile, "wns-client-secret-file").trimmingCharacters(
                in: .whitespacesAndNewlines)
            wns = (clientID, secret, reader.string("wns-token-url") ?? WNSAccessToken.production)
        }
        if let keyFile = reader.string("webpush-vapid-key-file") {
            guard let subject = reader.string("webpush-subject"),
                subject.hasPrefix("mailto:") || subject.hasPrefix("https://")
            else {
                throw ConfigError("webpush-vapid-key-file needs webpush-subject (mailto: or https: contact, RFC 8292)")
            }
            webPush = (try Self.secret(keyFile, "webpush-vapid-key-file"), subject)
        }
    }

    /// Reads a credential file; the error names the setting, never the content.
    static func secret(_ path: String, _ key: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigError("\(key): cannot read \(path)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// The deployment's own credentials (the hub default's), per platform.
    public var credentials: [PlatformCredentials] {
        var all: [PlatformCredentials] = []
        if let apns { all.append(.apns(apns)) }
        if let fcm { all.append(.fcm(account: fcm.account, url: fcm.url, tokenURL: fcm.tokenURL)) }
        if let wns { all.append(.wns(clientID: wns.clientID, clientSecret: wns.clientSecret, tokenURL: wns.tokenURL)) }
        if let webPush { all.append(.webPush(keyPEM: webPush.keyPEM, subject: webPush.subject)) }
        return all
    }

    /// The hub default's sender of each platform: real where configured (unless `provider` is
    /// `inbox`), the inbox otherwise, over `client` (shut down by whoever runs them after the last
    /// send, ``PushClientShutdown``).
    public func senders(inbox: InboxProvider, client: PushClient) async throws -> (
        senders: [Platform: any PushSender], real: [Platform]
    ) {
        var senders: [Platform: any PushSender] = [.apns: inbox, .fcm: inbox, .wns: inbox, .browser: inbox]
        guard provider == .auto else { return (senders, []) }
        var real: [Platform] = []
        for credentials in self.credentials {
            do {
                senders[credentials.platform] = try await credentials.makeSender(client: client, timeout: pushTimeout)
            } catch {
                // The setting's name, never the content (a key library's error could quote it).
                let problem =
                    switch credentials.platform {
                    case .apns: "apns-key-file is not a P-256 private key in PEM (the .p8 file)"
                    case .fcm: "fcm-service-account-file: private_key is not an RSA private key in PEM"
                    default: "webpush-vapid-key-file is not a P-256 private key in PEM"
                    }
                throw ConfigError(problem)
            }
            real.append(credentials.platform)
        }
        return (senders, real)
    }
}
