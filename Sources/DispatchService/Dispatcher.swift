import Foundation
public import GRDB
public import HeraldProto
public import HeraldRPC
import Synchronization
import Metrics

/// Resolves a send's audience through one StreamAudience call and hands the deliveries to the
/// provider batch by batch; records the notification and its per-platform counts.
///
/// Deliveries happen within the Send call for now; the durable outbox with retries replaces this
/// loop when real providers arrive.
public final class Dispatcher: Sendable {
    private let db: any DatabaseWriter
    private let registrations: RPCClient
    private let provider: any PushProvider
    /// Deadline of the audience stream of one send (large audiences take a while).
    private let audienceTimeout: Duration

    public init(db: any DatabaseWriter, registrations: RPCClient, provider: any PushProvider, audienceTimeout: Duration = .seconds(600)) throws {
        self.db = db
        self.registrations = registrations
        self.provider = provider
        self.audienceTimeout = audienceTimeout
        try Self.migrator.migrate(db)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("notification-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE notification (
                        id TEXT PRIMARY KEY NOT NULL,
                        sender TEXT NOT NULL,
                        target_user TEXT NOT NULL,
                        target_tag TEXT NOT NULL,
                        state INTEGER NOT NULL,
                        created_at INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL
                    );
                    CREATE TABLE notification_platform (
                        notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                        platform INTEGER NOT NULL,
                        success INTEGER NOT NULL,
                        failure INTEGER NOT NULL,
                        PRIMARY KEY (notification_id, platform)
                    ) WITHOUT ROWID;
                    """)
        }
        return migrator
    }

    public func send(_ request: SendRequest, context: RPCContext) async throws -> Outcome {
        guard request.targetUser.isEmpty != request.targetTag.isEmpty else {
            throw ServiceError.invalidArgument("set exactly one of target_user and target_tag")
        }
        guard !request.payloads.isEmpty else { throw ServiceError.invalidArgument("at least one payload is required") }
        var prepared: [Platform: PlatformRules.Prepared] = [:]
        for payload in request.payloads {
            guard prepared[payload.platform] == nil else {
                throw ServiceError.invalidArgument("two payloads for \(payload.platform)")
            }
            prepared[payload.platform] = try PlatformRules.prepare(payload)
        }
        let tag = request.targetUser.isEmpty ? request.targetTag : "username:\(request.targetUser)"
        let id = Self.newNotificationID()
        let created = unixMillis()
        try await db.write { db in
            try db.execute(
                sql: """
                    INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [id, request.sender, request.targetUser, request.targetTag, OutcomeState.processing.rawValue, created, created])
        }
        var logger = context.logger
        logger[metadataKey: "herald.notification_id"] = "\(id)"

        let counts = Mutex<[Platform: PlatformOutcome]>([:])
        let onlyPlatform = prepared.count == 1 ? prepared.keys.first! : Platform.unspecified
        do {
            try await registrations.stream(
                RegistrationServiceMethods.streamAudience,
                StreamAudienceRequest(tag: tag, platform: onlyPlatform),
                requestID: context.requestID,
                timeout: audienceTimeout
            ) { [provider, prepared] batch in
                let deliveries = batch.registrations.compactMap { registration -> Delivery? in
                    guard let payload = prepared[registration.platform] else { return nil }
                    return Delivery(
                        notificationID: id, registrationID: registration.registrationID, platform: registration.platform,
                        handle: registration.handle, headers: payload.headers, body: payload.body)
                }
                guard !deliveries.isEmpty else { return }
                let accepted = try await provider.deliver(deliveries)
                counts.withLock { counts in
                    for (delivery, ok) in zip(deliveries, accepted) {
                        var outcome = counts[delivery.platform] ?? PlatformOutcome(platform: delivery.platform)
                        if ok { outcome.success += 1 } else { outcome.failure += 1 }
                        counts[delivery.platform] = outcome
                    }
                }
            }
        } catch {
            logger.warning("send abandoned", metadata: ["herald.error": "\(error)"])
            try await record(id, state: .abandoned, counts: counts.withLock { $0 })
            throw error
        }
        let final = counts.withLock { $0 }
        let state: OutcomeState = final.isEmpty ? .noTargetFound : .completed
        try await record(id, state: state, counts: final)
        Counter(label: "herald_sends_total", dimensions: [("state", "\(state)")]).increment()
        for outcome in final.values {
            let platform = outcome.platform.name
            Counter(label: "herald_deliveries_total", dimensions: [("platform", platform), ("outcome", "success")])
                .increment(by: Int(outcome.success))
            Counter(label: "herald_deliveries_total", dimensions: [("platform", platform), ("outcome", "failure")])
                .increment(by: Int(outcome.failure))
        }
        let total = final.values.reduce(0) { $0 + $1.success + $1.failure }
        logger.info("sent", metadata: ["herald.deliveries": "\(total)", "herald.state": "\(state)"])
        return Outcome(
            notificationID: id, state: state, platforms: final.values.sorted { $0.platform.rawValue < $1.platform.rawValue },
            createdAtUnixMs: created, sender: request.sender)
    }

    /// The outcome of send `id`; with a `requester`, only if they sent it (NOT_FOUND otherwise, as
    /// for an unknown id, so ids of other users' sends cannot be probed).
    public func outcome(of id: String, requester: String = "") throws -> Outcome {
        try db.read { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT state, created_at, sender FROM notification WHERE id = ?", arguments: [id]),
                requester.isEmpty || row["sender"] == requester
            else { throw ServiceError.notFound("notification \(id) not found") }
            let platforms = try Row.fetchAll(
                db,
                sql: "SELECT platform, success, failure FROM notification_platform WHERE notification_id = ? ORDER BY platform",
                arguments: [id]
            ).map { PlatformOutcome(platform: Platform(rawValue: $0["platform"]), success: $0["success"], failure: $0["failure"]) }
            return Outcome(
                notificationID: id, state: OutcomeState(rawValue: row["state"]), platforms: platforms,
                createdAtUnixMs: row["created_at"], sender: row["sender"])
        }
    }

    private func record(_ id: String, state: OutcomeState, counts: [Platform: PlatformOutcome]) async throws {
        try await db.write { db in
            try db.execute(
                sql: "UPDATE notification SET state = ?, updated_at = ? WHERE id = ?",
                arguments: [state.rawValue, unixMillis(), id])
            for outcome in counts.values {
                try db.execute(
                    sql: """
                        INSERT INTO notification_platform (notification_id, platform, success, failure) VALUES (?, ?, ?, ?)
                        ON CONFLICT (notification_id, platform) DO UPDATE SET success = excluded.success, failure = excluded.failure
                        """,
                    arguments: [id, outcome.platform.rawValue, outcome.success, outcome.failure])
            }
        }
    }

    /// "n-" and 32 hex characters (128 random bits).
    static func newNotificationID() -> String {
        "n-" + randomHex(words: 2)
    }
}
