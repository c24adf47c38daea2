import Foundation
public import HeraldModel
public import HeraldProto
public import HeraldService

/// What the outbox does the same way on both databases, written once over ``OutboxStore/sql``:
/// reads (outcomes, delivery records, the console's, exports, trace parents) and writes of one
/// statement each (purges, the dead-handle queue).
///
/// Why only these yet: on SQLite the outbox's transactions (sends, claims, results, scheduled
/// sends, erasure) still run as GRDB's own `write`, and a transaction of the seam beside them on
/// the same writer connection would interleave with theirs. A read takes a reader connection and
/// a single statement is its own transaction, so both are safe beside them (as
/// ``HubCredentialStore``'s writes are).
///
/// The reads of one answer are separate statements, not one snapshot: a send's row is read
/// before its counters, so a send read as finished has final counters.
extension OutboxStore {
    /// The outcome of send `id`; with a `requester`, only if they sent it, with a `hub`, only if
    /// it was sent on that hub (NOT_FOUND otherwise, as for an unknown id, so ids of other users'
    /// and other hubs' sends cannot be probed).
    nonisolated(nonsending) public func outcome(of id: String, requester: String = "", hub: String = "")
        async throws -> Outcome
    {
        let row = try await OutboxQueries.notification(id, requester: requester, hub: hub, withBody: true, sql)
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
            sender: row.sender, hub: row.hub, startedAtUnixMs: row.startedAt, finishedAtUnixMs: row.finishedAt,
            originalBody: row.originalBody)
    }

    /// The outbox entries of send `id`, in outbox order, with the same visibility as
    /// ``outcome(of:requester:hub:)``.
    nonisolated(nonsending) public func deliveries(
        of id: String, requester: String = "", hub: String = "", failedOnly: Bool = false, after: Int64, limit: Int
    ) async throws -> [DeliveryRecord] {
        _ = try await OutboxQueries.notification(id, requester: requester, hub: hub, withBody: false, sql)
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

    // MARK: the console's reads (issue 18): each a range of the (hub, created_at, id) index, never a scan of `delivery`

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

    // MARK: maintenance

    /// Deletes finished sends last changed before `before` (Unix ms): the notification, and by
    /// cascade its payloads, deliveries and counters. A hundred sends per statement, so a purge of
    /// large sends never holds the writer (or many row locks) long. Returns how many sends.
    @discardableResult
    nonisolated(nonsending) public func purge(before: Int64) async throws -> Int {
        try await sql.deleteInBatches(batch: 100) {
            """
            DELETE FROM notification WHERE id IN (
                SELECT id FROM notification WHERE state IN (\(list: Outbox.finishedStateValues)) AND updated_at < \(before)
                LIMIT 100)
            """
        }
    }

    /// Deletes every finished send of `hub` (a deleted hub's) with its payloads, deliveries and counters.
    @discardableResult
    nonisolated(nonsending) public func purge(hub: String) async throws -> Int {
        try await sql.deleteInBatches(batch: 100) {
            """
            DELETE FROM notification WHERE id IN (
                SELECT id FROM notification WHERE state IN (\(list: Outbox.finishedStateValues)) AND hub = \(hub) LIMIT 100)
            """
        }
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

    /// Export of a device's records. Like an erase, a page of devices scans the delivery table (no
    /// index on registration id); it walks the primary key, so each call stops at `limit` matches.
    nonisolated(nonsending) public func exportDeliveries(to ids: [String], after: Int64, limit: Int) async throws
        -> [DeviceDelivery]
    {
        guard !ids.isEmpty else { return [] }
        return try await sql.query(
            """
            SELECT sequence, notification_id, registration_id, platform, handle, state, attempts, last_status, reason,
                   updated_at
            FROM delivery WHERE registration_id IN (\(list: ids)) AND sequence > \(after)
            ORDER BY sequence LIMIT \(Int64(limit))
            """
        ) {
            DeviceDelivery(
                sequence: try $0[0], notificationID: try $0[1], registrationID: try $0[2],
                platform: Platform(rawValue: try $0[3]), handle: try $0[4], state: DeliveryState(rawValue: try $0[5]),
                attempts: try $0[6], lastStatus: try $0[7], reason: try $0[8], updatedAt: try $0[9])
        }
    }

    nonisolated(nonsending) public func exportInbox(of ids: [String], after: Int64, limit: Int) async throws
        -> [InboxEntry]
    {
        guard !ids.isEmpty else { return [] }
        return try await sql.query(
            """
            SELECT \(raw: InboxProvider.columns) FROM inbox
            WHERE registration_id IN (\(list: ids)) AND sequence > \(after) ORDER BY sequence LIMIT \(Int64(limit))
            """, InboxProvider.entry)
    }
}

enum OutboxQueries {
    struct NotificationRow {
        var state: OutcomeState
        var createdAt: Int64
        var sender: String
        var hub: String
        var startedAt: Int64
        var finishedAt: Int64
        var originalBody: [UInt8]
    }

    /// Send `id` as the reads see it: NOT_FOUND for another requester's or hub's, as for an unknown id.
    static func notification(
        _ id: String, requester: String, hub: String, withBody: Bool, _ sql: some SQLSession
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
        guard requester.isEmpty || found.sender == requester, hub.isEmpty || found.hub == hub else {
            throw ServiceError.notFound("notification \(id) not found")
        }
        return found
    }
}
