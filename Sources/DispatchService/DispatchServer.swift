import AsyncHTTPClient
import Foundation
import GRDB
public import HeraldModel
import HeraldProto
public import HeraldRPC
public import HeraldService
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

/// Shuts the senders' HTTP client down when the process stops. Listed before the delivery worker,
/// so the service group (which stops services in reverse order) stops it after the worker's last
/// send; AsyncHTTPClient traps on a client released without a shutdown.
struct PushClientShutdown: Service {
    let client: PushClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}

/// The RPC handlers of herald-dispatch.
public struct DispatchHandlers: DispatchServiceHandler {
    public let dispatcher: Dispatcher
    public let outbox: Outbox
    public let inbox: InboxProvider
    public let hubSenders: HubSenders?
    public let credentials: HubCredentialStore?
    /// `test-mode`: whether ResetForTests may run.
    public let testMode: Bool

    public init(
        dispatcher: Dispatcher, outbox: Outbox, inbox: InboxProvider, hubSenders: HubSenders? = nil,
        credentials: HubCredentialStore? = nil,
        testMode: Bool = false
    ) {
        self.dispatcher = dispatcher
        self.outbox = outbox
        self.inbox = inbox
        self.hubSenders = hubSenders
        self.credentials = credentials
        self.testMode = testMode
    }

    public func setHubCredentials(_ request: SetHubCredentialsRequest, context: RPCContext) async throws
        -> HubCredentialsResponse
    {
        let (senders, store) = try requireHubs()
        guard Names.isValidHubName(request.hub) else {
            throw ServiceError.invalidArgument("hub must be \(Names.hubNameRule)")
        }
        let credentials = try PlatformCredentials.parse(request)
        let platform = credentials.platform
        // A certificate already ended would only fail its pushes: refused while the old credentials
        // still stand. (One stored that ends later is loaded all the same; its pushes wait.)
        if let ends = credentials.expiresAtUnixMs, ends <= unixMillis() {
            throw ServiceError.invalidArgument(
                "the APNs certificate ended on \(iso8601(unixMillis: ends).prefix(10)): export a current one")
        }
        // Checked first, stored, then in place: a refresh reading the store meanwhile cannot undo it.
        let sender = try await senders.prepare(hub: request.hub, credentials)
        let updatedAt = try await store.set(request)
        senders.install(hub: request.hub, credentials, sender, updatedAt: updatedAt, changedHere: true)
        context.logger.notice(
            "hub credentials set",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.platform": "\(platform.name)",
                "herald.credentials": "\(credentials.summary)",
            ])
        return HubCredentialsResponse(hub: request.hub, platforms: senders.status(hub: request.hub))
    }

    public func getHubCredentials(_ request: GetHubCredentialsRequest, context: RPCContext) async throws
        -> HubCredentialsResponse
    {
        let (senders, _) = try requireHubs()
        let hub = Names.hub(request.hub)
        // The last day's sends say whether each platform's credentials work.
        let health = try await outbox.recentPlatformResults(hub: hub, since: unixMillis() - 86_400_000, limit: 500)
            .health()
        var platforms = senders.status(hub: hub)
        for index in platforms.indices {
            let platform = platforms[index].platform
            if let seen = health[platform] {
                platforms[index].lastError = seen.lastError
                platforms[index].lastErrorAtUnixMs = seen.at
                platforms[index].failing = seen.failing
            }
            // Pushes waiting for a retry with nothing delivered since: failing now, for this reason.
            if let retried = senders.retried(hub: hub, platform: platform),
                retried.at >= platforms[index].lastErrorAtUnixMs
            {
                platforms[index].lastError = retried.reason
                platforms[index].lastErrorAtUnixMs = retried.at
                platforms[index].failing = true
            }
        }
        return HubCredentialsResponse(hub: hub, platforms: platforms)
    }

    public func listSends(_ request: ListSendsRequest, context: RPCContext) async throws -> ListSendsResponse {
        try request.scope.requireHub("listing a hub's sends")
        guard (0...200).contains(request.limit), request.beforeCreatedAtUnixMs >= 0 else {
            throw ServiceError.invalidArgument("limit must be 1 to 200 and before_created_at_unix_ms not negative")
        }
        let before =
            request.beforeCreatedAtUnixMs == 0
            ? (createdAt: Int64.max, id: "")
            : (createdAt: request.beforeCreatedAtUnixMs, id: request.beforeNotificationID)
        let hub = Names.hub(request.hub)
        var sends: [Outcome] = []
        for id in try await outbox.recentSends(
            hub: hub, before: before, limit: request.limit == 0 ? 25 : Int(request.limit))
        {
            // Purged between the two reads: left out.
            guard let outcome = try? await outbox.outcome(of: id, scope: .hub(hub)) else { continue }
            sends.append(outcome)
        }
        return ListSendsResponse(sends: sends)
    }

    public func sendStats(_ request: SendStatsRequest, context: RPCContext) async throws -> SendStatsResponse {
        try request.scope.requireHub("a hub's send figures")
        guard (0...1440).contains(request.minutes) else {
            throw ServiceError.invalidArgument("minutes must be 1 to 1440")
        }
        let minutes = Int64(request.minutes == 0 ? 60 : request.minutes)
        let since = (unixMillis() / 60000 - minutes + 1) * 60000
        return SendStatsResponse(minutes: try await outbox.sendStats(hub: Names.hub(request.hub), since: since))
    }

    public func deleteHubCredentials(
        _ request: DeleteHubCredentialsRequest, context: RPCContext
    ) async throws -> HubCredentialsResponse {
        let (senders, store) = try requireHubs()
        _ = try await store.delete(hub: request.hub, platform: request.platform)
        senders.remove(hub: request.hub, platform: request.platform)
        return HubCredentialsResponse(hub: request.hub, platforms: senders.status(hub: request.hub))
    }

    public func setHubPushLimits(_ request: HubPushLimits, context: RPCContext) async throws -> HubPushLimits {
        // Outbox.setPushLimits checks the hub and the limits.
        let limits = HubPushLimit(
            perDay: request.pushesPerDay, perMonth: request.pushesPerMonth, maxConcurrent: request.maxConcurrentPushes,
            weight: request.weight)
        try await outbox.setPushLimits(limits, hub: request.hub)
        context.logger.notice(
            "hub push limits set",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.pushes_per_day": "\(limits.perDay)",
                "herald.pushes_per_month": "\(limits.perMonth)", "herald.max_concurrent": "\(limits.maxConcurrent)",
                "herald.weight": "\(limits.weight)",
            ])
        return try await getHubPushLimits(GetHubPushLimitsRequest(hub: request.hub), context: context)
    }

    public func getHubPushLimits(_ request: GetHubPushLimitsRequest, context: RPCContext) async throws
        -> HubPushLimits
    {
        try Outbox.checkHub(request.hub)
        let (limits, today, month) = try await outbox.pushLimits(hub: request.hub)
        return HubPushLimits(
            hub: request.hub, pushesPerDay: limits.perDay, pushesPerMonth: limits.perMonth,
            maxConcurrentPushes: limits.maxConcurrent, pushesToday: today, pushesThisMonth: month,
            weight: limits.weight)
    }

    public func getHubQueue(_ request: GetHubQueueRequest, context: RPCContext) async throws -> HubQueueStatus {
        try request.scope.requireHub("a hub's queue")
        try Outbox.checkHub(request.hub)
        let queue = try await outbox.hubQueue(hub: request.hub)
        return HubQueueStatus(pending: queue.pending, oldestDueMs: queue.oldestDue)
    }

    private func requireHubs() throws -> (HubSenders, HubCredentialStore) {
        guard let hubSenders, let credentials else {
            throw ServiceError(.unimplemented, "hub credentials are not served here")
        }
        return (hubSenders, credentials)
    }

    public func resetForTests(_ request: ResetForTestsRequest, context: RPCContext) async throws
        -> ResetForTestsResponse
    {
        try TestMode.require(testMode, service: .dispatch)
        var deleted = try await outbox.deleteEverything() + inbox.deleteEverything()
        // herald-auth's reset deletes the hubs; their credentials go with them.
        if let credentials, let hubSenders {
            for hub in Set(try await credentials.all().map(\.hub)) {
                deleted += Int64(try await credentials.delete(hub: hub, platform: .unspecified))
                hubSenders.remove(hub: hub, platform: .unspecified)
            }
        }
        return ResetForTestsResponse(deleted: deleted)
    }

    public func send(_ request: SendRequest, context: RPCContext) async throws -> SendResponse {
        SendResponse(outcome: try await dispatcher.send(request, context: context))
    }

    public func cancelScheduled(_ request: CancelScheduledRequest, context: RPCContext) async throws -> Outcome {
        guard !request.notificationID.isEmpty else { throw ServiceError.invalidArgument("notification_id is required") }
        let outcome = try await outbox.cancelScheduled(
            request.notificationID, scope: SendScope(requester: "", hub: request.hub, scope: request.scope))
        context.logger.info(
            "scheduled send cancelled", metadata: ["herald.notification_id": "\(request.notificationID)"])
        return outcome
    }

    public func deleteHubSends(_ request: DeleteHubSendsRequest, context: RPCContext) async throws
        -> DeleteHubSendsResponse
    {
        guard !request.hub.isEmpty else { throw ServiceError.invalidArgument("hub is required") }
        guard request.hub != Names.defaultHub else {
            throw ServiceError(.failedPrecondition, "the hub default cannot be deleted")
        }
        let cancelled = try await outbox.cancelScheduled(hub: request.hub)
        let deleted = try await outbox.purge(hub: request.hub)
        try await outbox.deletePushLimits(hub: request.hub)
        context.logger.notice(
            "a deleted hub's sends removed",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.cancelled": "\(cancelled)", "herald.deleted": "\(deleted)",
            ])
        return DeleteHubSendsResponse(cancelled: cancelled, deleted: Int64(deleted))
    }

    public func eraseUser(_ request: EraseUserRequest, context: RPCContext) async throws -> EraseUserResponse {
        try ExportJSON.checkPerson(user: request.user, hub: request.hub)
        let erased = try await outbox.eraseUser(request.user, hub: request.hub)
        context.logger.notice(
            "user's sends erased",
            metadata: [
                "herald.user": "\(request.user)", "herald.hub": "\(request.hub)", "herald.removed": "\(erased.removed)",
                "herald.redacted": "\(erased.redacted)",
            ])
        return EraseUserResponse(removed: erased.removed, redacted: erased.redacted)
    }

    public func eraseDevices(_ request: EraseDevicesRequest, context: RPCContext) async throws -> EraseUserResponse {
        guard request.devices.count <= 1000 else { throw ServiceError.invalidArgument("at most 1,000 devices") }
        guard request.devices.allSatisfy({ $0.registrationID.utf8.count <= 256 && $0.handle.utf8.count <= 8192 })
        else {
            throw ServiceError.invalidArgument("a registration id is over 256 bytes or a handle over 8,192")
        }
        let erased = try await outbox.eraseDevices(request.devices)
        guard erased.inFlight == 0 else {
            throw ServiceError(
                .unavailable,
                "\(erased.inFlight) deliveries to these devices are in flight; erase them again once they are answered")
        }
        return EraseUserResponse(removed: erased.removed, redacted: erased.redacted)
    }

    public func exportUser(_ request: ExportUserRequest, context: RPCContext) async throws -> ExportPage {
        let limit = try ExportJSON.check(request)
        struct Item: Encodable {
            var notificationId: String
            var hub: String
            var sender: String
            var targetUser: String
            var targetTag: String
            var state: String
            var createdAt: String
            var finishedAt: String
        }
        let page = try await outbox.exportSends(
            user: request.user, hub: request.hub, after: request.after, limit: limit)
        let items = try page.map {
            try ExportJSON.encode(
                Item(
                    notificationId: $0.id, hub: $0.hub, sender: $0.sender, targetUser: $0.targetUser,
                    targetTag: $0.targetTag, state: "\($0.state)", createdAt: ExportJSON.time($0.createdAt),
                    finishedAt: ExportJSON.time($0.finishedAt)))
        }
        return ExportPage(items: items, next: page.count == limit ? page.last?.id ?? "" : "")
    }

    public func exportDeviceRecords(_ request: ExportDeviceRecordsRequest, context: RPCContext) async throws
        -> ExportPage
    {
        let limit = try ExportJSON.pageSize(request.limit)
        guard request.devices.count <= ExportLimits.devicesPerCall else {
            throw ServiceError.invalidArgument("at most \(ExportLimits.devicesPerCall) devices")
        }
        guard request.devices.allSatisfy({ $0.registrationID.utf8.count <= 256 }) else {
            throw ServiceError.invalidArgument("a registration id is over 256 bytes")
        }
        // The cursor is the last sequence of the page before, as text: ExportPage's cursors are strings.
        guard let after = request.after.isEmpty ? 0 : Int64(request.after), after >= 0 else {
            throw ServiceError.invalidArgument("after must be the next of a page before")
        }
        let ids = request.devices.map(\.registrationID)
        guard !ids.isEmpty else { return ExportPage() }
        var items: [[UInt8]] = []
        var last: Int64 = 0
        switch request.kind {
        case .deliveries:
            let page = try await outbox.exportDeliveries(to: ids, after: after, limit: limit)
            items = page.map(Self.exportItem)
            last = page.last?.sequence ?? 0
        case .inbox:
            let page = try await outbox.exportInbox(of: ids, after: after, limit: limit)
            items = page.map { InboxEntryJSON($0).sortedJSON }
            last = page.last?.sequence ?? 0
        case .unrecognized(let kind):
            throw ServiceError.invalidArgument("unknown kind \(kind)")
        }
        return ExportPage(items: items, next: items.count == limit ? String(last) : "")
    }

    /// A delivery record of an export: its members sorted by name, as every export item's are
    /// (written by ``JSONObjectWriter``: an export writes one per delivery).
    static func exportItem(_ delivery: DeviceDelivery) -> [UInt8] {
        var item = JSONObjectWriter()
        item.member("attempts", Int64(delivery.attempts))
        item.member("handle", delivery.handle)
        item.member("lastStatus", Int64(delivery.lastStatus))
        item.member("notificationId", delivery.notificationID)
        item.member("platform", delivery.platform.name)
        item.member("reason", delivery.reason)
        item.member("registrationId", delivery.registrationID)
        item.member("state", "\(delivery.state)")
        item.member("updatedAt", ExportJSON.time(delivery.updatedAt))
        return item.finished
    }

    public func getOutcome(_ request: GetOutcomeRequest, context: RPCContext) async throws -> Outcome {
        try await outbox.outcome(
            of: request.notificationID,
            scope: SendScope(requester: request.requester, hub: request.hub, hubs: request.hubs, scope: request.scope))
    }

    public func listDeliveries(_ request: ListDeliveriesRequest, context: RPCContext) async throws
        -> ListDeliveriesResponse
    {
        let limit = try Self.pageSize(request.limit, after: request.afterSequence)
        return ListDeliveriesResponse(
            deliveries: try await outbox.deliveries(
                of: request.notificationID,
                scope: SendScope(requester: request.requester, hub: request.hub, scope: request.scope),
                failedOnly: request.failedOnly,
                after: request.afterSequence, limit: limit))
    }

    public func listInbox(_ request: ListInboxRequest, context: RPCContext) async throws -> ListInboxResponse {
        let limit = try Self.pageSize(request.limit, after: min(request.afterSequence, request.beforeSequence))
        let page: InboxProvider.Page =
            request.newestFirst ? .newestBefore(request.beforeSequence) : .after(request.afterSequence)
        return ListInboxResponse(entries: try await inbox.list(page, limit: limit, handle: request.handle))
    }

    /// A page's size: 100 when unset, at most 1000; negative limits and cursors are refused.
    private static func pageSize(_ limit: Int32, after: Int64) throws -> Int {
        guard limit >= 0, after >= 0 else {
            throw ServiceError.invalidArgument("limit and after_sequence must not be negative")
        }
        return limit == 0 ? 100 : min(Int(limit), 1000)
    }
}

/// herald-dispatch's start-up.
public enum DispatchServer {
    /// What herald-dispatch runs; `HeraldProcess.main` runs it as a process, tests build it in-process.
    public static let definition = ServiceDefinition.rpc(.dispatch, extraKeys: DispatchConfig.keys) {
        context -> RPCServiceParts in
        let config = try DispatchConfig(reader: context.reader)
        let database = try context.openDatabase()
        let outbox: Outbox
        let inbox: InboxProvider
        let credentialStore: HubCredentialStore
        let box = try await context.secretBox(purpose: "push credentials")
        switch database {
        case .sqlite(let sqlite):
            inbox = try InboxProvider(db: sqlite)
            outbox = try Outbox(db: sqlite, lease: config.lease)
            credentialStore = HubCredentialStore(db: sqlite, box: box)
        case .postgres(let postgres):
            let replica = config.replicaID ?? "\(ProcessInfo.processInfo.hostName):\(context.config.runtimeDir)"
            outbox = try await Outbox(postgres: postgres, replica: replica, lease: config.lease)
            inbox = InboxProvider(postgres: postgres)
            credentialStore = HubCredentialStore(db: postgres.sql, box: box)
            context.logger.notice(
                "outbox in PostgreSQL",
                metadata: [
                    "herald.replica": "\(replica)", "herald.lease_seconds": "\(config.lease.components.seconds)",
                ])
        }
        let abandoned = try await outbox.deleteAbandonedStaging()
        if abandoned > 0 {
            context.logger.notice(
                "deleted the staged audience of sends a previous process never committed",
                metadata: ["herald.count": "\(abandoned)"])
        }
        let client = PushHTTP.makeClient(extraCAFile: config.pushCAFile)
        let (senders, real): ([Platform: any PushSender], [Platform])
        do {
            (senders, real) = try await config.senders(inbox: inbox, client: client)
        } catch {
            // A bad key or account file: the client must be shut down before it is dropped.
            try? await client.shutdown()
            throw error
        }
        let hubSenders = HubSenders(
            defaults: senders, inbox: inbox, client: client, timeout: config.pushTimeout,
            recordOnly: config.provider == .inbox)
        try await hubSenders.load(from: credentialStore, logger: context.logger)
        let recorded = Platform.delivered.filter { !real.contains($0) }.map(\.name)
        context.logger.notice(
            "push providers",
            metadata: [
                "herald.sent": "\(real.map(\.name).joined(separator: ","))",
                "herald.recorded_in_inbox": "\(recorded.joined(separator: ","))",
            ])
        let worker = DeliveryWorker(
            outbox: outbox, senders: hubSenders,
            registrations: RegistrationServiceClient(context.client(.registration)),
            policy: config.retryPolicy,
            batchSize: config.batchSize, workers: config.workers, pushTimeout: config.pushTimeout,
            logger: context.logger)
        let dispatcher = Dispatcher(
            outbox: outbox, registrations: RegistrationServiceClient(context.client(.registration)),
            retryWindow: config.retryWindow,
            audienceMemoryRows: config.audienceMemoryRows, maxScheduledPerHub: config.maxScheduledPerHub,
            onEnqueue: { worker.wake() })
        var table = MethodTable()
        DispatchHandlers(
            dispatcher: dispatcher, outbox: outbox, inbox: inbox, hubSenders: hubSenders, credentials: credentialStore,
            testMode: context.config.testMode
        ).register(into: &table)
        let purge = Periodic("outcome and inbox purge", every: .seconds(3600), logger: context.logger) {
            let before = unixMillis() - config.retention.wholeMilliseconds
            let sends = try await outbox.purge(before: before)
            let recorded = try await inbox.purge(before: before)
            try await outbox.purgeUsage(before: before)
            if sends + recorded > 0 {
                context.logger.info(
                    "purged old sends", metadata: ["herald.sends": "\(sends)", "herald.inbox": "\(recorded)"])
            }
        }
        // Scheduled sends: due ones are made within a quarter second of their time, and at once
        // after a restart that spanned it (the first tick runs at start).
        let scheduler = Periodic("scheduled sends", every: .milliseconds(250), logger: context.logger) {
            try await dispatcher.fireDueScheduled(logger: context.logger)
        }
        var background: [any Service] =
            database.services + [PushClientShutdown(client: client), worker, purge, scheduler]
        if outbox.sharedByReplicas {
            background += [
                // A send committed by any replica wakes this one's worker at once (LISTEN/NOTIFY),
                // rather than at its next poll; listening again a second after the connection fails.
                Periodic("listening for sends", every: .seconds(1), logger: context.logger) {
                    try await outbox.listenForSends { worker.wake() }
                },
                // Credentials set through another replica reach this one within the interval.
                Periodic("hub credentials refresh", every: config.credentialsRefresh, logger: context.logger) {
                    try await hubSenders.load(from: credentialStore, logger: context.logger)
                },
            ]
        }
        if let box {
            background.append(box.keeper(logger: context.logger) { try await credentialStore.rewrapAll() })
        }
        return RPCServiceParts(table: table, background: background, healthChecks: [database.healthCheck])
    }
}
