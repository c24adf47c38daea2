import Foundation
public import GRDB
import HeraldModel
public import HeraldProto
public import HeraldService

/// Dispatch's durable outbox in SQLite: one row per (notification, registration). Send commits the
/// notification, its payloads and every delivery row in one transaction before it answers, so an
/// acknowledged send survives a crash. Workers claim due rows (counting the attempt and taking a
/// lease in the same transaction), deliver, and record the result; after a restart, leased rows
/// are due again at once, their attempt count showing they were retried.
///
/// One herald-dispatch process owns a database (leases are not shared between processes):
/// ``PostgresOutbox`` is the outbox replicas share.
public final class Outbox: OutboxStore {
    /// GRDB's writer, for reads inside the transactions not yet written over ``sql``.
    let db: any DatabaseWriter
    /// Those transactions' way in: ``SQLiteDatabase/write(_:)``, which takes turns with ``sql``'s.
    let sqlite: SQLiteDatabase
    public var sql: any SQLDatabase { sqlite }
    public let now: @Sendable () -> Int64

    /// `db` is the one object every write to the file goes through (``SQLiteDatabase``): the inbox
    /// and hubs' credentials share it.
    public init(db: SQLiteDatabase, now: @escaping @Sendable () -> Int64 = unixMillis) throws {
        self.db = db.writer
        self.sqlite = db
        self.now = now
        try HeraldDatabase.migrate(Self.migrator, db.writer, sharing: [InboxProvider.migrator])
    }

    /// OutcomeState numbers for SQL (`state IN (…)`): a send that is still going, and one that is over.
    static let unfinishedStates = unfinishedStateValues.map { String($0) }.joined(separator: ", ")
    static let unfinishedStateValues = [OutcomeState.enqueued, .processing].map(\.rawValue)
    static let finishedStateValues = [OutcomeState.completed, .abandoned, .noTargetFound, .cancelled].map(\.rawValue)

    /// One registration to deliver to, from the audience stream (or a handle of a direct send,
    /// with an empty registration id).
    public struct Target: Sendable {
        public var registrationID: String
        public var platform: Platform
        public var handle: String
        /// The payload variant it gets (template sends; 0 otherwise).
        public var variant: Int = 0

        /// For herald-bench's template loop, which makes a native send's targets.
        package init(registrationID: String, platform: Platform, handle: String, variant: Int = 0) {
            self.registrationID = registrationID
            self.platform = platform
            self.handle = handle
            self.variant = variant
        }
    }

    /// Commits a send: the notification (ENQUEUED, or NO_TARGET_FOUND without targets), its
    /// payloads, and one pending delivery per target, all or nothing.
    ///
    /// With `scheduled`, the notification was stored by ``schedule(id:sender:targetUser:targetTag:hub:fireAt:request:)``
    /// and is made now: its scheduled row is deleted in the same transaction, and when there is
    /// none (cancelled, or already made) nothing is written and nil is returned. So a scheduled
    /// send is made once, whatever crashes in between.
    ///
    /// With `staged`, the audience's first targets were staged (``stage(_:to:)``) and `targets` are
    /// the rest: the staged rows become deliveries in the same transaction, before `targets`.
    @discardableResult
    public func enqueue(
        id: String, sender: String, targetUser: String, targetTag: String, payloads: [OutboxPayload], targets: [Target],
        staged: StagedAudience? = nil, retryWindow: Duration, hub: String = Names.defaultHub, scheduled: Bool = false,
        originalBody: [UInt8] = []
    ) async throws -> (state: OutcomeState, created: Int64)? {
        let at = now()
        let giveUp = at + retryWindow.wholeMilliseconds
        let stagedCount = staged?.count ?? 0
        let none = targets.isEmpty && stagedCount == 0
        let state: OutcomeState = none ? .noTargetFound : .enqueued
        let traceParent = Self.currentTraceParent
        let created: Int64? = try await sqlite.write { db in
            var created = at
            if scheduled {
                try db.execute(sql: "DELETE FROM scheduled_send WHERE notification_id = ?", arguments: [id])
                guard db.changesCount == 1 else { return nil }
                try db.execute(
                    sql: "UPDATE notification SET state = ?, updated_at = ?, finished_at = ? WHERE id = ?",
                    arguments: [state.rawValue, at, none ? at : 0, id])
                created =
                    try Int64.fetchOne(db, sql: "SELECT created_at FROM notification WHERE id = ?", arguments: [id])
                    ?? at
            } else {
                try db.execute(
                    sql: """
                        INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at, hub, finished_at,
                                                  original_body, trace_parent)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        id, sender, targetUser, targetTag, state.rawValue, at, at, hub, none ? at : 0,
                        Data(originalBody), traceParent,
                    ])
            }
            guard !none else { return created }
            for payload in payloads {
                try db.execute(
                    sql: """
                        INSERT INTO outbox_payload (notification_id, platform, body, push_type, priority, content_type,
                                                    expires_at_ms, collapse_id, variant)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        id, payload.platform.rawValue, Data(payload.body), payload.options.pushType,
                        payload.options.priority,
                        payload.options.contentType, payload.options.expiresAtUnixMs, payload.options.collapseID,
                        payload.variant,
                    ])
            }
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                          next_attempt_at, give_up_at, updated_at, variant)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """)
            var perPlatform: [Platform: Int] = staged?.perPlatform ?? [:]
            if stagedCount > 0 {
                try db.execute(
                    sql: """
                        INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                              next_attempt_at, give_up_at, updated_at, variant)
                        SELECT notification_id, registration_id, platform, handle, message_id, ?, ?, ?, ?, variant
                        FROM audience_staging WHERE notification_id = ? ORDER BY position
                        """,
                    arguments: [DeliveryState.pending.rawValue, at, giveUp, at, id])
                try db.execute(sql: "DELETE FROM audience_staging WHERE notification_id = ?", arguments: [id])
            }
            let ids = staged?.messageIDs ?? MessageIDs()
            for (index, target) in targets.enumerated() {
                try insert.execute(arguments: [
                    id, target.registrationID, target.platform.rawValue, target.handle, ids.id(stagedCount + index),
                    DeliveryState.pending.rawValue, at, giveUp, at, target.variant,
                ])
                perPlatform[target.platform, default: 0] += 1
            }
            for (platform, count) in perPlatform {
                try db.execute(
                    sql: """
                        INSERT INTO notification_platform (notification_id, platform, success, failure, pending)
                        VALUES (?, ?, 0, 0, ?)
                        """,
                    arguments: [id, platform.rawValue, count])
            }
            return created
        }
        return created.map { (state, $0) }
    }
}
