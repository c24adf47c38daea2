import Foundation
import GRDB
import HeraldModel
public import HeraldProto

/// Reads: outcomes, delivery records and the payloads of a send.
extension Outbox {
    /// The outcome of send `id`; with a `requester`, only if they sent it, with a `hub`, only if
    /// it was sent on that hub (NOT_FOUND otherwise, as for an unknown id, so ids of other users'
    /// and other hubs' sends cannot be probed).
    public func outcome(of id: String, requester: String = "", hub: String = "") throws -> Outcome {
        try db.read { db in
            let row = try Self.notification(id, requester: requester, hub: hub, db)
            let body =
                try Data.fetchOne(db, sql: "SELECT original_body FROM notification WHERE id = ?", arguments: [id])
                ?? Data()
            return Outcome(
                notificationID: id, state: OutcomeState(rawValue: row["state"]),
                platforms: try platformOutcomes(of: id, db), createdAtUnixMs: row["created_at"], sender: row["sender"],
                hub: row["hub"], startedAtUnixMs: row["started_at"], finishedAtUnixMs: row["finished_at"],
                originalBody: [UInt8](body))
        }
    }

    /// The outbox entries of send `id`, with the same visibility as ``outcome(of:requester:)``.
    public func deliveries(
        of id: String, requester: String = "", hub: String = "", failedOnly: Bool = false, after: Int64, limit: Int
    ) throws -> [DeliveryRecord] {
        try db.read { db in
            _ = try Self.notification(id, requester: requester, hub: hub, db)
            return try deliveries(of: id, failedOnly: failedOnly, after: after, limit: limit, db)
        }
    }

    static func notification(_ id: String, requester: String, hub: String = "", _ db: Database) throws -> Row {
        guard
            let row = try Row.fetchOne(
                db,
                sql: "SELECT state, created_at, sender, hub, started_at, finished_at FROM notification WHERE id = ?",
                arguments: [id]),
            requester.isEmpty || row["sender"] == requester,
            hub.isEmpty || row["hub"] == hub
        else { throw ServiceError.notFound("notification \(id) not found") }
        return row
    }

    /// A read on the outbox's database (tests).
    func read<T>(_ body: (Database) throws -> T) throws -> T { try db.read(body) }

    /// Per-platform counts of one notification, from the counters ``record(_:)`` keeps.
    func platformOutcomes(of id: String, _ db: Database) throws -> [PlatformOutcome] {
        let failures = Dictionary(
            grouping: try Row.fetchAll(
                db,
                sql:
                    "SELECT platform, reason, count FROM notification_failure WHERE notification_id = ? ORDER BY reason",
                arguments: [id]),
            by: { Platform(rawValue: $0["platform"]) })
        return try Row.fetchAll(
            db,
            sql: """
                SELECT platform, success, failure, pending, removed, retries FROM notification_platform
                WHERE notification_id = ? ORDER BY platform
                """,
            arguments: [id]
        ).map { row in
            let platform = Platform(rawValue: row["platform"])
            return PlatformOutcome(
                platform: platform, success: row["success"], failure: row["failure"], pending: row["pending"],
                failures: (failures[platform] ?? []).map {
                    FailureCount(classifying: $0["reason"], count: $0["count"])
                },
                removedHandles: row["removed"], retries: row["retries"])
        }
    }

    /// The deliveries of one notification, in outbox order.
    func deliveries(of id: String, failedOnly: Bool = false, after: Int64, limit: Int, _ db: Database) throws
        -> [DeliveryRecord]
    {
        // A send's failures are few next to its deliveries: filtered on the (notification_id, sequence) index's rows.
        let failed =
            failedOnly ? " AND state IN (\(DeliveryState.failed.rawValue), \(DeliveryState.abandoned.rawValue))" : ""
        return try Row.fetchAll(
            db,
            sql: """
                SELECT sequence, registration_id, platform, state, attempts, message_id, last_status, reason, next_attempt_at,
                       handle
                FROM delivery WHERE notification_id = ? AND sequence > ?\(failed) ORDER BY sequence LIMIT ?
                """,
            arguments: [id, after, limit]
        ).map { row in
            let state = DeliveryState(rawValue: row["state"])
            return DeliveryRecord(
                sequence: row["sequence"], registrationID: row["registration_id"],
                platform: Platform(rawValue: row["platform"]),
                state: state, attempts: row["attempts"], messageID: row["message_id"], lastStatus: row["last_status"],
                reason: row["reason"], nextAttemptAtUnixMs: state == .pending ? row["next_attempt_at"] : 0,
                handle: row["handle"], failureClass: FailureClass(state: state, reason: row["reason"]))
        }
    }

    static func payloads(of id: String, _ db: Database) throws -> [OutboxPayload.Key: OutboxPayload] {
        var payloads: [OutboxPayload.Key: OutboxPayload] = [:]
        for row in try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT platform, body, push_type, priority, content_type, expires_at_ms, collapse_id, variant
                    FROM outbox_payload WHERE notification_id = ?
                    """),
            arguments: [id])
        {
            let platform = Platform(rawValue: row["platform"])
            let body: Data = row["body"]
            let options = DeliveryOptions(
                pushType: row["push_type"], priority: row["priority"], contentType: row["content_type"],
                expiresAtUnixMs: row["expires_at_ms"], collapseID: row["collapse_id"])
            let payload = OutboxPayload(
                platform: platform, options: options, body: [UInt8](body), variant: row["variant"])
            payloads[payload.key] = payload
        }
        return payloads
    }
}
