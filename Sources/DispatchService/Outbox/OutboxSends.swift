import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldTelemetry
import PushProviders

extension Outbox {
    // MARK: sends

    /// Commits a send: the notification (ENQUEUED, or NO_TARGET_FOUND without targets), its
    /// payloads, and one pending delivery per target, all or nothing.
    ///
    /// With `scheduled`, the notification was stored by ``schedule(id:sender:targetUser:targetTag:hub:fireAt:request:originalBody:maxPending:)``
    /// and is made now: its scheduled row is deleted in the same transaction, and when there is
    /// none (cancelled, or already made, by this process or another) nothing is written and nil
    /// is returned. So a scheduled send is made once, whatever crashes in between.
    ///
    /// With `staged`, the audience's first targets were staged (``stage(_:to:)``) and `targets` are
    /// the rest: the staged rows become deliveries in the same transaction, before `targets`.
    @discardableResult
    public func enqueue(
        _ send: Send, targets: [Outbox.Target], staged: Outbox.StagedAudience? = nil, scheduled: Bool = false
    ) async throws -> (state: OutcomeState, created: Int64)? {
        let (id, sender, targetUser, targetTag) = (send.id, send.sender, send.targetUser, send.targetTag)
        let (payloads, retryWindow, hub, lane) = (send.payloads, send.retryWindow, send.hub, send.lane)
        let originalBody = send.originalBody
        let at = now()
        let giveUp = at + retryWindow.wholeMilliseconds
        let stagedCount = staged?.count ?? 0
        let none = targets.isEmpty && stagedCount == 0
        let state: OutcomeState = none ? .noTargetFound : .enqueued
        let finishedAt: Int64 = none ? at : 0
        let traceParent = Self.currentTraceParent
        let pending = DeliveryState.pending.rawValue
        let made: (created: Int64, platforms: [Platform])? = try await sql.transaction { session in
            var created = at
            if scheduled {
                guard try await session.execute("DELETE FROM scheduled_send WHERE notification_id = \(id)") == 1 else {
                    return nil
                }
                created =
                    try await session.executeReturning(
                        """
                        UPDATE notification SET state = \(state.rawValue), updated_at = \(at), finished_at = \(finishedAt)
                        WHERE id = \(id) RETURNING created_at
                        """
                    ).first?[0] ?? at
            } else {
                try await session.execute(
                    """
                    INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at, hub,
                                              finished_at, original_body, trace_parent)
                    VALUES (\(id), \(sender), \(targetUser), \(targetTag), \(state.rawValue), \(at), \(at), \(hub),
                            \(finishedAt), \(originalBody), \(traceParent))
                    """)
            }
            guard !none else { return (created, []) }
            try await Self.countPushes(stagedCount + targets.count, hub: hub, at: at, session)
            for payload in payloads {
                try await session.execute(
                    """
                    INSERT INTO outbox_payload (notification_id, platform, variant, body, collapse_id, push_type, priority,
                                                content_type, expires_at_ms)
                    VALUES (\(id), \(payload.platform.rawValue), \(payload.variant), \(payload.body),
                            \(payload.options.collapseID), \(payload.options.pushType), \(payload.options.priority),
                            \(payload.options.contentType), \(payload.options.expiresAtUnixMs))
                    """)
            }
            var perPlatform: [Platform: Int] = staged?.perPlatform ?? [:]
            if let staged, stagedCount > 0 {
                try await session.execute(
                    """
                    INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                          next_attempt_at, give_up_at, updated_at, variant, hub, lane)
                    SELECT \(id), registration_id, platform, handle, message_id, \(pending), \(at), \(giveUp), \(at), variant,
                           \(hub), \(lane.rawValue)
                    FROM audience_staging WHERE staging_key = \(staged.key) ORDER BY position
                    """)
                try await session.execute("DELETE FROM audience_staging WHERE staging_key = \(staged.key)")
            }
            let rows = Self.rows(of: targets, from: stagedCount, messageIDs: staged?.messageIDs ?? MessageIDs())
            try await session.execute(
                """
                INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                      next_attempt_at, give_up_at, updated_at, variant, hub, lane)
                SELECT \(id), u.registration_id, u.platform, u.handle, u.message_id, \(pending), \(at), \(giveUp), \(at),
                       u.variant, \(hub), \(lane.rawValue)
                FROM \(rows: rows) \(SQLRowSource.inOrder)
                """)
            for target in targets { perPlatform[target.platform, default: 0] += 1 }
            for (platform, count) in perPlatform.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                try await session.execute(
                    """
                    INSERT INTO notification_platform (notification_id, platform, success, failure, pending)
                    VALUES (\(id), \(platform.rawValue), 0, 0, \(count))
                    """)
            }
            if let notice = self.sendCommittedNotice(hub: hub, platforms: Array(perPlatform.keys)) {
                try await session.execute(notice)
            }
            return (created, Array(perPlatform.keys))
        }
        // After the commit: a claim between the two would find the hub without rows and drop it.
        if let made, !made.platforms.isEmpty { noteSend(hub: hub, platforms: made.platforms) }
        return made.map { (state, $0.created) }
    }

    /// `targets` as rows, numbered from `start` in the send's audience (`position`), each with the
    /// message id of its position.
    static func rows(of targets: [Outbox.Target], from start: Int, messageIDs: MessageIDs) -> SQLRowSource {
        SQLRowSource(count: targets.count)
            .integers("position", targets.indices.map { Int64(start + $0) })
            .texts("registration_id", targets.map(\.registrationID))
            .integers("platform", targets.map { Int64($0.platform.rawValue) })
            .texts("handle", targets.map(\.handle))
            .texts("message_id", targets.indices.map { messageIDs.id(start + $0) })
            .integers("variant", targets.map { Int64($0.variant) })
    }

    /// Appends `targets` to `staged`'s rows, in one transaction.
    public func stage(_ targets: [Outbox.Target], to staged: inout Outbox.StagedAudience) async throws {
        guard !targets.isEmpty else { return }
        let rows = Self.rows(of: targets, from: staged.count, messageIDs: staged.messageIDs)
        try await sql.execute(
            """
            INSERT INTO audience_staging (staging_key, position, registration_id, platform, handle, message_id, staged_at,
                                          variant)
            SELECT \(staged.key), u.position, u.registration_id, u.platform, u.handle, u.message_id, \(now()), u.variant
            FROM \(rows: rows)
            """)
        staged.record(targets)
    }

    /// Deletes a send's staged rows (it failed before its commit). Best effort: rows it leaves are
    /// deleted at a later start.
    public func discardStaged(_ staged: Outbox.StagedAudience) async {
        _ = try? await sql.execute("DELETE FROM audience_staging WHERE staging_key = \(staged.key)")
    }

    /// Deletes staged rows no send will commit any more (their process stopped mid-send); called
    /// once at start-up. On PostgreSQL, only rows staged over ``Outbox/stagingAge`` ago: the
    /// others may belong to a peer's send in progress.
    @discardableResult
    public func deleteAbandonedStaging() async throws -> Int {
        let before = sharedByReplicas ? now() - Outbox.stagingAge : Int64.max
        return try await sql.execute("DELETE FROM audience_staging WHERE staged_at < \(before)")
    }

    // MARK: scheduled sends

    /// Due scheduled sends not taken by another process, earliest first, each now taken by this
    /// one for ``Outbox/scheduledTake`` ms: a send whose making failed for a moment (a peer
    /// down) is due again after that, and a tick never gets the same sends back at once.
    public func dueScheduled(limit: Int) async throws -> [(id: String, fireAt: Int64, request: [UInt8])] {
        let at = now()
        // Asked four times a second, and nearly always nothing is due: a read first (on SQLite, a
        // reader connection), so a tick takes no write lock from the sends and results.
        let due = try await sql.queryFirst(
            "SELECT 1 FROM scheduled_send WHERE fire_at <= \(at) AND taken_until <= \(at) LIMIT 1")
        guard due != nil else { return [] }
        return try await sql.transactionRetryingConflicts { session in
            try await session.executeReturning(
                """
                UPDATE scheduled_send SET taken_until = \(at + Outbox.scheduledTake), taken_by = \(self.replica)
                WHERE notification_id IN (
                    SELECT notification_id FROM scheduled_send WHERE fire_at <= \(at) AND taken_until <= \(at)
                    ORDER BY fire_at LIMIT \(limit) \(SQLFragment.skipLocked))
                RETURNING notification_id, fire_at, request
                """
            ).map { (id: try $0[0] as String, fireAt: try $0[1] as Int64, request: try $0[2] as [UInt8]) }
                .sorted { $0.fireAt < $1.fireAt }
        }
    }
}
