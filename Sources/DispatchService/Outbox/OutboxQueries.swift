import Foundation
import HeraldModel
public import HeraldProto
import HeraldSQL
import PushProviders

/// The outbox's reads (outcomes, delivery records, the console's, exports, trace parents),
/// scheduled sends (storing, cancelling, abandoning), erasing a user's sends, purges, the
/// dead-handle queue and the reset, for both databases. Its transactions are in
/// OutboxTransactions.swift.
///
/// The reads of one answer are separate statements, not one snapshot: a send's row is read
/// before its counters, so a send read as finished has final counters.
extension Outbox {
    /// The outcome of send `id`, when `scope` admits it (NOT_FOUND otherwise, as for an unknown
    /// id, so ids of other users' and other hubs' sends cannot be probed).
    nonisolated(nonsending) public func outcome(of id: String, scope: SendScope) async throws -> Outcome {
        let row = try await OutboxQueries.notification(id, scope: scope, withBody: true, sql)
        var failures: [Platform: [FailureCount]] = [:]
        for failure in try await sql.query(
            "SELECT platform, reason, count FROM notification_failure WHERE notification_id = \(id) ORDER BY reason")
        {
            failures[Platform(rawValue: try failure[0]), default: []].append(
                FailureCount(classifying: try failure[1], count: try failure[2]))
        }
        let platforms = try await sql.query(
            """
            SELECT platform, success, failure, pending, removed, retries FROM notification_platform
            WHERE notification_id = \(id) ORDER BY platform
            """
        ) { counters in
            let platform = Platform(rawValue: try counters[0])
            return PlatformOutcome(
                platform: platform, success: try counters[1], failure: try counters[2], pending: try counters[3],
                failures: failures[platform] ?? [], removedHandles: try counters[4], retries: try counters[5])
        }
        return Outcome(
            notificationID: id, state: row.state, platforms: platforms, createdAtUnixMs: row.createdAt,
            sender: Principal.legacySender(stored: row.sender), hub: row.hub, startedAtUnixMs: row.startedAt,
            finishedAtUnixMs: row.finishedAt, originalBody: row.originalBody, principal: Principal(stored: row.sender))
    }

    /// The outbox entries of send `id`, in outbox order, with the same visibility as
    /// ``outcome(of:scope:)``.
    nonisolated(nonsending) public func deliveries(
        of id: String, scope: SendScope, failedOnly: Bool = false, after: Int64, limit: Int
    ) async throws -> [DeliveryRecord] {
        _ = try await OutboxQueries.notification(id, scope: scope, withBody: false, sql)
        var query: SQLQuery = """
            SELECT sequence, registration_id, platform, state, attempts, message_id, last_status, reason, next_attempt_at,
                   handle
            FROM delivery WHERE notification_id = \(id) AND sequence > \(after)
            """
        // A send's failures are few next to its deliveries: filtered on the (notification_id, sequence) index's rows.
        if failedOnly {
            query += " AND state IN (\(DeliveryState.failed.rawValue), \(DeliveryState.abandoned.rawValue))"
        }
        query += " ORDER BY sequence LIMIT \(Int64(limit))"
        return try await sql.query(query) { row in
            let state = DeliveryState(rawValue: try row[3])
            let reason: String = try row[7]
            let next: Int64 = try row[8]
            return DeliveryRecord(
                sequence: try row[0], registrationID: try row[1], platform: Platform(rawValue: try row[2]),
                state: state, attempts: try row[4], messageID: try row[5], lastStatus: try row[6], reason: reason,
                nextAttemptAtUnixMs: state == .pending ? next : 0, handle: try row[9],
                failureClass: FailureClass(state: state, reason: reason))
        }
    }

    // MARK: the console's reads: each a range of the (hub, created_at, id) index, never a scan of `delivery`

    /// ListSends: ids of `hub`'s sends made before `before` (created_at, id), newest first.
    nonisolated(nonsending) public func recentSends(
        hub: String, before: (createdAt: Int64, id: String), limit: Int
    ) async throws -> [String] {
        try await sql.query(
            """
            SELECT id FROM notification
            WHERE hub = \(hub) AND (created_at < \(before.createdAt) OR (created_at = \(before.createdAt) AND id < \(before.id)))
            ORDER BY created_at DESC, id DESC LIMIT \(Int64(limit))
            """
        ) { try $0[0] }
    }

    /// SendStats: per minute since `since` (Unix ms), the sends made, their deliveries and failures by reason.
    nonisolated(nonsending) public func sendStats(hub: String, since: Int64) async throws -> [SendStatsMinute] {
        let counts: [(minute: Int64, sends: Int64, delivered: Int64)] = try await sql.query(
            """
            SELECT n.created_at / 60000 AS minute, count(DISTINCT n.id), CAST(coalesce(sum(p.success), 0) AS BIGINT)
            FROM notification n LEFT JOIN notification_platform p ON p.notification_id = n.id
            WHERE n.hub = \(hub) AND n.created_at >= \(since) GROUP BY minute ORDER BY minute
            """
        ) { (try $0[0], try $0[1], try $0[2]) }
        let failures: [(minute: Int64, reason: String, count: Int64)] = try await sql.query(
            """
            SELECT n.created_at / 60000 AS minute, f.reason, CAST(sum(f.count) AS BIGINT)
            FROM notification n JOIN notification_failure f ON f.notification_id = n.id
            WHERE n.hub = \(hub) AND n.created_at >= \(since) GROUP BY minute, f.reason ORDER BY minute, f.reason
            """
        ) { (try $0[0], try $0[1], try $0[2]) }
        let failed = Dictionary(grouping: failures, by: \.minute)
        return counts.map { row in
            SendStatsMinute(
                startUnixMs: row.minute * 60000, delivered: row.delivered,
                failures: (failed[row.minute] ?? []).map { FailureCount(classifying: $0.reason, count: $0.count) },
                sends: row.sends)
        }
    }

    /// The per-platform counters of `hub`'s sends made since `since`, newest first (at most
    /// `limit` rows), and the failure reasons of those sends, newest first: what the credentials
    /// status reads its last error from.
    nonisolated(nonsending) public func recentPlatformResults(hub: String, since: Int64, limit: Int) async throws
        -> OutboxPlatformResults
    {
        var results = OutboxPlatformResults()
        results.counts = try await sql.query(
            """
            SELECT p.platform, n.created_at, p.success, p.failure, p.pending
            FROM notification n JOIN notification_platform p ON p.notification_id = n.id
            WHERE n.hub = \(hub) AND n.created_at >= \(since) ORDER BY n.created_at DESC, n.id DESC LIMIT \(Int64(limit))
            """
        ) { (Platform(rawValue: try $0[0]), try $0[1], try $0[2], try $0[3], try $0[4]) }
        results.failures = try await sql.query(
            """
            SELECT f.platform, n.created_at, f.reason
            FROM notification n JOIN notification_failure f ON f.notification_id = n.id
            WHERE n.hub = \(hub) AND n.created_at >= \(since) ORDER BY n.created_at DESC, n.id DESC LIMIT \(Int64(limit))
            """
        ) { (Platform(rawValue: try $0[0]), try $0[1], try $0[2]) }
        return results
    }

    // MARK: scheduled sends (which are due is each store's: PostgreSQL's replicas take them in turn)

    /// Stores a send to be made at `fireAt` (Unix ms): its notification (SCHEDULED) and the
    /// request, in one transaction, before Send answers; refused when `hub` already has
    /// `maxPending` waiting (a Send key must not be able to fill the disk). The count is read in
    /// the insert's transaction; on PostgreSQL concurrent schedules on two replicas may each see
    /// room for one more, so the bound holds within the replicas' count.
    nonisolated(nonsending) public func schedule(
        id: String, sender: String, targetUser: String, targetTag: String, hub: String, fireAt: Int64, request: [UInt8],
        originalBody: [UInt8] = [], maxPending: Int = .max
    ) async throws -> Int64 {
        let at = now()
        let traceParent = Outbox.currentTraceParent
        try await sql.transaction { session in
            let pending: Int64 =
                try await session.queryFirst(
                    """
                    SELECT COUNT(*) FROM scheduled_send s JOIN notification n ON n.id = s.notification_id
                    WHERE n.hub = \(hub)
                    """)?[0] ?? 0
            try Outbox.checkScheduledRoom(pending: Int(pending), maxPending: maxPending, hub: hub)
            try await session.execute(
                """
                INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at, hub, original_body,
                                          trace_parent)
                VALUES (\(id), \(sender), \(targetUser), \(targetTag), \(OutcomeState.scheduled.rawValue), \(at), \(at), \(hub),
                        \(originalBody), \(traceParent))
                """)
            try await session.execute(
                "INSERT INTO scheduled_send (notification_id, fire_at, request) VALUES (\(id), \(fireAt), \(request))")
        }
        return at
    }

    /// Cancels a scheduled send not made yet (its outcome becomes CANCELLED); the same answer when
    /// it was cancelled before. NOT_FOUND for an unknown id (or another hub's, with `hub`);
    /// FAILED_PRECONDITION once it was made. Whoever deletes the scheduled row (this, or the send
    /// being made) decides: a send is made or cancelled, never both.
    nonisolated(nonsending) public func cancelScheduled(_ id: String, scope: SendScope) async throws -> Outcome {
        let at = now()
        try await sql.transaction { session in
            let row = try await OutboxQueries.notification(id, scope: scope, withBody: false, session)
            if try await !OutboxQueries.endScheduled(id, as: .cancelled, at: at, session), row.state != .cancelled {
                throw ServiceError(
                    .failedPrecondition, "notification \(id) was already sent; only a scheduled send can be cancelled")
            }
        }
        return try await outcome(of: id, scope: scope)
    }

    /// Cancels every scheduled send of `hub` not made yet (a deleted hub's); returns how many.
    nonisolated(nonsending) public func cancelScheduled(hub: String) async throws -> Int64 {
        let at = now()
        return try await sql.transaction { session in
            try await OutboxQueries.cancelScheduled(where: "hub = \(hub)", at: at, session)
        }
    }

    /// Gives up a scheduled send whose stored request cannot be made (ABANDONED); nothing is sent.
    nonisolated(nonsending) public func abandonScheduled(_ id: String) async throws {
        let at = now()
        try await sql.transaction { session in
            _ = try await OutboxQueries.endScheduled(id, as: .abandoned, at: at, session)
        }
    }

    // MARK: erasure (see EraseUser in dispatch.proto; ``ErasedRows``)

    /// Erase, the user's sends: a scheduled send whose only target is the user is cancelled; the
    /// user's name goes from every send as sender and as target; a finished send to the user
    /// alone loses its payloads and the body NH's telemetry keeps.
    nonisolated(nonsending) public func eraseUser(_ user: String, hub: String) async throws -> ErasedRows {
        let at = now()
        let ofHub: SQLQuery = "(\(hub) = '' OR hub = \(hub))"
        let toUser: SQLQuery =
            "(target_user = \(user) OR target_tag IN (\(list: OutboxErasure.tags(of: user)))) AND \(ofHub)"
        let finished = Outbox.finishedStateValues
        return try await sql.transactionRetryingConflicts { session in
            var erased = ErasedRows()
            erased.removed += try await OutboxQueries.cancelScheduled(where: toUser, at: at, session)
            erased.removed += Int64(
                try await session.execute(
                    """
                    DELETE FROM outbox_payload WHERE notification_id IN (
                        SELECT id FROM notification WHERE state IN (\(list: finished)) AND \(toUser))
                    """))
            erased.redacted += Int64(
                try await session.execute(
                    """
                    UPDATE notification SET original_body = \([UInt8]()), target_user = '', target_tag = ''
                    WHERE state IN (\(list: finished)) AND \(toUser)
                    """))
            erased.redacted += Int64(
                try await session.execute(
                    "UPDATE notification SET target_user = '' WHERE target_user = \(user) AND \(ofHub)"))
            erased.redacted += Int64(
                try await session.execute("UPDATE notification SET sender = '' WHERE sender = \(user) AND \(ofHub)"))
            return erased
        }
    }

    // MARK: maintenance

    /// Deletes every send with its payloads, deliveries and counters, the dead-handle queue and
    /// staged audiences, and hubs' push limits and counters (ResetForTests). A delivery a worker holds at that moment records its
    /// result into nothing.
    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 {
        try await sql.deleteAll([
            "delivery", "notification_failure", "notification_platform", "outbox_payload", "scheduled_send",
            "notification", "handle_removal", "audience_staging", "hub_push_limit", "hub_usage",
        ])
    }

    /// Deletes finished sends last changed before `before` (Unix ms) with their payloads,
    /// deliveries and counters; returns how many sends.
    @discardableResult
    nonisolated(nonsending) public func purge(before: Int64) async throws -> Int {
        // Leases that ended before `before`: a batch's holder deletes its lease when it records,
        // a restart deletes its own; this is what a replica that never came back left.
        try await sql.execute("DELETE FROM delivery_lease WHERE expires_at < \(before)")
        return try await OutboxQueries.purgeFinished(where: "updated_at < \(before)", sql)
    }

    /// Deletes every finished send of `hub` (a deleted hub's) with its payloads, deliveries and counters.
    @discardableResult
    nonisolated(nonsending) public func purge(hub: String) async throws -> Int {
        try await OutboxQueries.purgeFinished(where: "hub = \(hub)", sql)
    }

    /// Dead handles registration has not confirmed deleting yet, oldest first.
    nonisolated(nonsending) public func pendingRemovals(limit: Int) async throws -> [(
        id: Int64, platform: Platform, handle: String, since: Int64
    )] {
        try await sql.query(
            "SELECT id, platform, handle, invalid_since FROM handle_removal ORDER BY id LIMIT \(Int64(limit))"
        ) { (try $0[0], Platform(rawValue: try $0[1]), try $0[2], try $0[3]) }
    }

    nonisolated(nonsending) public func removalDone(_ id: Int64) async throws {
        try await sql.execute("DELETE FROM handle_removal WHERE id = \(id)")
    }

    /// The stored traceparent of each of the sends `ids` that was traced (only read when tracing is on).
    nonisolated(nonsending) public func traceParents(of ids: [String]) async throws -> [String: String] {
        guard !ids.isEmpty else { return [:] }
        var parents: [String: String] = [:]
        for row in try await sql.query(
            "SELECT id, trace_parent FROM notification WHERE id IN (\(list: ids)) AND trace_parent <> ''")
        {
            let id: String = try row[0]
            parents[id] = try row[1] as String
        }
        return parents
    }

    // MARK: exports (see ExportUser in dispatch.proto)

    /// Export: the sends `user` made or that were addressed to them, by id after `after`.
    nonisolated(nonsending) public func exportSends(user: String, hub: String, after: String, limit: Int) async throws
        -> [SendRecord]
    {
        try await sql.query(
            """
            SELECT id, hub, sender, target_user, target_tag, state, created_at, finished_at FROM notification
            WHERE (sender = \(user) OR target_user = \(user) OR target_tag IN (\(list: OutboxErasure.tags(of: user))))
              AND (\(hub) = '' OR hub = \(hub)) AND id > \(after)
            ORDER BY id LIMIT \(Int64(limit))
            """
        ) {
            SendRecord(
                id: try $0[0], hub: try $0[1], sender: try $0[2], targetUser: try $0[3], targetTag: try $0[4],
                state: OutcomeState(rawValue: try $0[5]), createdAt: try $0[6], finishedAt: try $0[7])
        }
    }

    /// Export of devices' records. Like an erase, each call scans the delivery table (no index on
    /// registration id): it walks the primary key and stops at `limit` matches. `ids` go as one
    /// bound array, so a call may name thousands of devices, and an export scans the table once per
    /// group of `ExportLimits.devicesPerCall` devices, not once per page of them.
    nonisolated(nonsending) public func exportDeliveries(to ids: [String], after: Int64, limit: Int) async throws
        -> [DeviceDelivery]
    {
        guard !ids.isEmpty else { return [] }
        return try await sql.query(
            """
            SELECT sequence, notification_id, registration_id, platform, handle, state, attempts, last_status, reason,
                   updated_at
            FROM delivery WHERE registration_id \(anyOf: ids) AND sequence > \(after)
            ORDER BY sequence LIMIT \(Int64(limit))
            """
        ) {
            DeviceDelivery(
                sequence: try $0[0], notificationID: try $0[1], registrationID: try $0[2],
                platform: Platform(rawValue: try $0[3]), handle: try $0[4], state: DeliveryState(rawValue: try $0[5]),
                attempts: try $0[6], lastStatus: try $0[7], reason: try $0[8], updatedAt: try $0[9])
        }
    }

    /// Export: the inbox entries of the registrations `ids`, by sequence after `after`.
    nonisolated(nonsending) public func exportInbox(of ids: [String], after: Int64, limit: Int) async throws
        -> [InboxEntry]
    {
        guard !ids.isEmpty else { return [] }
        return try await sql.query(
            """
            SELECT \(raw: InboxProvider.columns) FROM inbox
            WHERE registration_id \(anyOf: ids) AND sequence > \(after) ORDER BY sequence LIMIT \(Int64(limit))
            """, InboxProvider.entry)
    }
}

enum OutboxQueries {
    /// Deletes scheduled send `id`'s row and, when there was one, finishes its notification as
    /// `state` now; whether there was one. Whoever deletes that row (this, or the send being made)
    /// decides what becomes of the send.
    static func endScheduled(_ id: String, as state: OutcomeState, at: Int64, _ session: some SQLSession)
        async throws -> Bool
    {
        guard try await session.execute("DELETE FROM scheduled_send WHERE notification_id = \(id)") == 1 else {
            return false
        }
        try await session.execute(
            "UPDATE notification SET state = \(state.rawValue), updated_at = \(at), finished_at = \(at) WHERE id = \(id)"
        )
        return true
    }

    /// Deletes the finished sends `condition` picks, with (by cascade) their payloads, deliveries
    /// and counters: a hundred per statement, so a purge of large sends never holds the writer (or
    /// many row locks) long. Returns how many sends.
    static func purgeFinished(where condition: SQLQuery, _ sql: any SQLDatabase) async throws -> Int {
        try await sql.deleteInBatches(batch: 100) {
            """
            DELETE FROM notification WHERE id IN (
                SELECT id FROM notification WHERE state IN (\(list: Outbox.finishedStateValues)) AND \(condition) LIMIT 100)
            """
        }
    }

    /// Cancels the scheduled sends among the notifications `condition` picks; returns how many.
    /// The scheduled rows go first, as when a send is made, so two transactions on the same sends
    /// lock them in the same order.
    static func cancelScheduled(where condition: SQLQuery, at: Int64, _ session: some SQLSession) async throws
        -> Int64
    {
        let ids: [String] = try await session.executeReturning(
            """
            DELETE FROM scheduled_send WHERE notification_id IN (SELECT id FROM notification WHERE \(condition))
            RETURNING notification_id
            """
        ).map { try $0[0] }
        guard !ids.isEmpty else { return 0 }
        try await session.execute(
            """
            UPDATE notification SET state = \(OutcomeState.cancelled.rawValue), updated_at = \(at), finished_at = \(at)
            WHERE id \(anyOf: ids)
            """)
        return Int64(ids.count)
    }

    struct NotificationRow {
        var state: OutcomeState
        var createdAt: Int64
        var sender: String
        var hub: String
        var startedAt: Int64
        var finishedAt: Int64
        var originalBody: [UInt8]
    }

    /// Send `id` as the reads see it: NOT_FOUND when `scope` does not admit it, as for an unknown id.
    static func notification(
        _ id: String, scope: SendScope, withBody: Bool, _ sql: some SQLSession
    ) async throws -> NotificationRow {
        let body: SQLQuery = withBody ? "original_body" : "''"
        guard
            let row = try await sql.queryFirst(
                "SELECT state, created_at, sender, hub, started_at, finished_at, \(body) FROM notification WHERE id = \(id)"
            )
        else { throw ServiceError.notFound("notification \(id) not found") }
        let found = NotificationRow(
            state: OutcomeState(rawValue: try row[0]), createdAt: try row[1], sender: try row[2], hub: try row[3],
            startedAt: try row[4], finishedAt: try row[5], originalBody: try row[6])
        guard scope.admits(sender: found.sender, hub: found.hub) else {
            throw ServiceError.notFound("notification \(id) not found")
        }
        return found
    }
}
