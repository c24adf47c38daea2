import Foundation
import HeraldModel
public import HeraldProto
import HeraldService
import Logging
import NIOCore
import PostgresNIO

/// Claims, leases and results on PostgreSQL: see ``PostgresOutbox`` for the rules.
extension PostgresOutbox {
    /// Takes back this replica's own leases, left by its previous run: due now, their attempt
    /// already counted (so they show as retried). Other replicas' leases are theirs until they expire.
    nonisolated(nonsending) public func recoverLeases() async throws -> Int {
        let at = now()
        let logger = db.logger
        return try await transactionRetryingConflicts { connection in
            let rows = try await connection.query(
                """
                UPDATE delivery SET leased_by = '', next_attempt_at = \(at)
                WHERE state = \(DeliveryState.pending.rawValue) AND leased_by = \(self.replica)
                RETURNING notification_id, platform
                """, logger: logger
            ).collect()
            try await Self.countRetries(
                try rows.map { try $0.decode((String, Int32).self) }, connection, logger: logger)
            // Scheduled sends this replica had taken and not made: due again now, not when the take ends.
            try await connection.query(
                "UPDATE scheduled_send SET taken_until = 0, taken_by = '' WHERE taken_by = \(self.replica)",
                logger: logger)
            return rows.count
        }
    }

    nonisolated(nonsending) public func claim(limit: Int, platforms: [Platform]) async throws -> [PushItem] {
        guard !platforms.isEmpty else { return [] }
        let at = now()
        let logger = db.logger
        return try await transactionRetryingConflicts { connection in
            try await self.take(limit: limit, platforms: platforms, leasing: true, at: at, connection, logger: logger)
        }
    }

    /// A third of the lease: two renewals may be missed (a stalled database, a busy machine)
    /// before a live replica loses what it holds.
    public var leaseRenewalInterval: Duration? { lease / 3 }

    /// Rows this replica still holds at the attempt its claim counted get a full lease from now.
    /// Rows being recorded (locked) are skipped rather than waited for, so a renewal never blocks
    /// or deadlocks with this replica's own results; rows another replica took over, or already
    /// recorded, do not match.
    nonisolated(nonsending) public func renewLeases(_ held: [(sequence: Int64, attempt: Int)]) async throws -> Int {
        guard !held.isEmpty else { return 0 }
        let until = now() + lease.wholeMilliseconds
        return try await db.rows(
            """
            WITH held AS (
                SELECT d.sequence FROM delivery d
                JOIN unnest(\(held.map(\.sequence))::bigint[], \(held.map { Int32(clamping: $0.attempt) })::int[])
                     AS u(sequence, attempt) ON d.sequence = u.sequence
                WHERE d.state = \(DeliveryState.pending.rawValue) AND d.leased_by = \(self.replica) AND d.attempts = u.attempt
                FOR UPDATE OF d SKIP LOCKED)
            UPDATE delivery d SET next_attempt_at = \(until) FROM held WHERE d.sequence = held.sequence
            RETURNING 1
            """
        ).count
    }

    nonisolated(nonsending) public func deliverLocally(
        limit: Int, platforms: [Platform], inbox: InboxProvider
    ) async throws -> (delivered: [Platform: Int], finished: [(id: String, state: OutcomeState)]) {
        guard !platforms.isEmpty else { return ([:], []) }
        let at = now()
        let logger = db.logger
        return try await transactionRetryingConflicts { connection in
            let items = try await self.take(
                limit: limit, platforms: platforms, leasing: false, at: at, connection, logger: logger)
            guard !items.isEmpty else { return ([:], []) }
            try await inbox.write(items, on: connection, logger: logger)
            let (delivered, decisions) = Outbox.deliveredLocally(items, at: at)
            return (delivered, try await self.apply(decisions, at: at, connection, logger: logger))
        }
    }

    /// Due deliveries of `platforms`, oldest first, locked for this transaction and skipped by
    /// everyone else's; with `leasing`, each is leased to this replica and its attempt counted.
    /// Rows whose lease had expired count as retried. Each platform is read as one ordered range
    /// of `delivery_due` (up to `limit` rows of each, then the oldest `limit`): a claim for the
    /// inbox's platforms does not walk a backlog of APNs rows. The rows read but not taken stay
    /// locked only until this transaction ends.
    func take(
        limit: Int, platforms: [Platform], leasing: Bool, at: Int64, _ connection: PostgresConnection, logger: Logger
    ) async throws -> [PushItem] {
        let pending = DeliveryState.pending.rawValue
        let platformValues = platforms.map(\.rawValue)
        let rows: [PostgresRow]
        if leasing {
            let until = at + lease.wholeMilliseconds
            rows = try await connection.query(
                """
                WITH due AS (
                    SELECT d.sequence, d.leased_by, d.next_attempt_at FROM unnest(\(platformValues)::integer[]) AS p(platform)
                    CROSS JOIN LATERAL (
                        SELECT sequence, leased_by, next_attempt_at FROM delivery
                        WHERE state = \(pending) AND platform = p.platform AND next_attempt_at <= \(at)
                        ORDER BY next_attempt_at, sequence LIMIT \(Int64(limit))
                        FOR UPDATE SKIP LOCKED) AS d
                    ORDER BY d.next_attempt_at, d.sequence LIMIT \(Int64(limit)))
                UPDATE delivery d SET leased_by = \(replica), attempts = d.attempts + 1, updated_at = \(at),
                                      next_attempt_at = \(until)
                FROM due WHERE d.sequence = due.sequence
                RETURNING d.sequence, d.notification_id, d.registration_id, d.platform, d.handle, d.message_id,
                          d.attempts - 1, d.give_up_at, d.variant, due.leased_by, due.next_attempt_at
                """, logger: logger
            ).collect()
        } else {
            rows = try await connection.query(
                """
                SELECT d.sequence, d.notification_id, d.registration_id, d.platform, d.handle, d.message_id, d.attempts,
                       d.give_up_at, d.variant, d.leased_by, d.next_attempt_at
                FROM unnest(\(platformValues)::integer[]) AS p(platform)
                CROSS JOIN LATERAL (
                    SELECT * FROM delivery
                    WHERE state = \(pending) AND platform = p.platform AND next_attempt_at <= \(at)
                    ORDER BY next_attempt_at, sequence LIMIT \(Int64(limit))
                    FOR UPDATE SKIP LOCKED) AS d
                ORDER BY d.next_attempt_at, d.sequence LIMIT \(Int64(limit))
                """, logger: logger
            ).collect()
        }
        guard !rows.isEmpty else { return [] }
        typealias Claimed = (
            sequence: Int64, notificationID: String, registrationID: String, platform: Int32, handle: String,
            messageID: String,
            attempts: Int32, giveUpAt: Int64, variant: Int32, leasedBy: String, due: Int64
        )
        var claimed: [Claimed] = try rows.map {
            try $0.decode((Int64, String, String, Int32, String, String, Int32, Int64, Int32, String, Int64).self)
        }
        // RETURNING keeps no order.
        claimed.sort { ($0.due, $0.sequence) < ($1.due, $1.sequence) }
        let ids = Array(Set(claimed.map(\.notificationID)))
        var hubs: [String: String] = [:]
        var enqueued: [String] = []
        for row in try await connection.query(
            "SELECT id, hub, state FROM notification WHERE id = ANY(\(ids))", logger: logger
        ).collect() {
            let (id, hub, state) = try row.decode((String, String, Int32).self)
            hubs[id] = hub
            if state == OutcomeState.enqueued.rawValue { enqueued.append(id) }
        }
        if !enqueued.isEmpty {
            // Only the first claim of a send takes its row's lock (the others read it processing).
            try await connection.query(
                """
                UPDATE notification SET state = \(OutcomeState.processing.rawValue), updated_at = \(at), started_at = \(at)
                WHERE id = ANY(\(enqueued)) AND state = \(OutcomeState.enqueued.rawValue)
                """, logger: logger)
        }
        var payloads: [String: [OutboxPayload.Key: OutboxPayload]] = [:]
        for row in try await connection.query(
            """
            SELECT notification_id, platform, variant, body, push_type, priority, content_type, expires_at_ms, collapse_id
            FROM outbox_payload WHERE notification_id = ANY(\(ids))
            """, logger: logger
        ).collect() {
            let (id, platform, variant, body, pushType, priority, contentType, expires, collapseID) = try row.decode(
                (String, Int32, Int32, ByteBuffer, String, Int32, String, Int64, String).self)
            let payload = OutboxPayload(
                platform: Platform(rawValue: platform),
                options: DeliveryOptions(
                    pushType: pushType, priority: priority, contentType: contentType, expiresAtUnixMs: expires,
                    collapseID: collapseID),
                body: Array(buffer: body), variant: Int(variant))
            payloads[id, default: [:]][payload.key] = payload
        }
        try await Self.countRetries(
            claimed.filter { !$0.leasedBy.isEmpty }.map { ($0.notificationID, $0.platform) }, connection, logger: logger
        )
        var items: [PushItem] = []
        items.reserveCapacity(claimed.count)
        for row in claimed {
            let platform = Platform(rawValue: row.platform)
            // Send stores a payload for every platform it targets, in the same transaction.
            guard
                let payload = payloads[row.notificationID]?[
                    OutboxPayload.Key(platform: platform, variant: Int(row.variant))]
            else {
                continue
            }
            items.append(
                PushItem(
                    sequence: row.sequence, notificationID: row.notificationID, registrationID: row.registrationID,
                    platform: platform, handle: row.handle, messageID: row.messageID, attempt: Int(row.attempts) + 1,
                    giveUpAt: row.giveUpAt, payload: payload, hub: hubs[row.notificationID] ?? Names.defaultHub))
        }
        return items
    }

    /// Adds taken-over leases to their send's `retries` counters.
    static func countRetries(_ rows: [(String, Int32)], _ connection: PostgresConnection, logger: Logger) async throws {
        var counts: [String: [Int32: Int64]] = [:]
        for (id, platform) in rows { counts[id, default: [:]][platform, default: 0] += 1 }
        for (id, platforms) in counts.sorted(by: { $0.key < $1.key }) {
            for (platform, count) in platforms.sorted(by: { $0.key < $1.key }) {
                try await connection.query(
                    """
                    UPDATE notification_platform SET retries = retries + \(count)
                    WHERE notification_id = \(id) AND platform = \(platform)
                    """, logger: logger)
            }
        }
    }

    nonisolated(nonsending) public func record(_ decisions: [Outbox.Decision]) async throws -> [(
        id: String, state: OutcomeState
    )] {
        guard !decisions.isEmpty else { return [] }
        let at = now()
        let logger = db.logger
        return try await transactionRetryingConflicts { connection in
            try await self.apply(decisions, at: at, connection, logger: logger)
        }
    }

    /// Records `decisions` that still hold (see ``PostgresOutbox``), their counters, handle
    /// removals, and the sends this finished.
    func apply(
        _ decisions: [Outbox.Decision], at: Int64, _ connection: PostgresConnection, logger: Logger
    ) async throws -> [(id: String, state: OutcomeState)] {
        let ids = Array(Set(decisions.map(\.notificationID))).sorted()
        // The sends' rows first, in one order for everyone: recording replicas take turns per send.
        try await connection.query(
            "SELECT id FROM notification WHERE id = ANY(\(ids)) ORDER BY id FOR UPDATE", logger: logger)
        let applied = try await connection.query(
            """
            UPDATE delivery d SET state = u.state, leased_by = '', last_status = u.status, reason = u.reason,
                   next_attempt_at = u.next_attempt_at, handle_removed = u.removed, updated_at = \(at),
                   attempts = d.attempts + u.counts
            FROM unnest(\(decisions.map(\.sequence))::bigint[], \(decisions.map { Int32($0.attempt) })::int[],
                        \(decisions.map(\.state.rawValue))::int[], \(decisions.map { Int32($0.status) })::int[],
                        \(decisions.map(\.reason))::text[], \(decisions.map(\.nextAttemptAt))::bigint[],
                        \(decisions.map { $0.removal != nil })::bool[], \(decisions.map { Int32($0.countsAttempt ? 1 : 0) })::int[])
                 AS u(sequence, attempt, state, status, reason, next_attempt_at, removed, counts)
            WHERE d.sequence = u.sequence AND d.state = \(DeliveryState.pending.rawValue) AND (u.attempt = 0 OR d.attempts = u.attempt)
            RETURNING d.sequence
            """, logger: logger
        ).collect()
        var holds = Set<Int64>()
        for row in applied { holds.insert(try row.decode(Int64.self)) }
        let deltas = Outbox.Delta.of(decisions.filter { holds.contains($0.sequence) })
        for decision in decisions where holds.contains(decision.sequence) {
            guard let removal = decision.removal else { continue }
            try await connection.query(
                """
                INSERT INTO handle_removal (platform, handle, invalid_since, created_at)
                VALUES (\(removal.platform.rawValue), \(removal.handle), \(removal.since), \(at))
                """, logger: logger)
        }
        var finished: [(String, OutcomeState)] = []
        for id in ids {
            guard let platforms = deltas[id] else { continue }
            for (platform, delta) in platforms.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                try await connection.query(
                    """
                    UPDATE notification_platform
                    SET success = success + \(Int64(delta.success)), failure = failure + \(Int64(delta.failure)),
                        pending = pending + \(Int64(delta.pending)), removed = removed + \(Int64(delta.removed)),
                        retries = retries + \(Int64(delta.retries))
                    WHERE notification_id = \(id) AND platform = \(platform.rawValue)
                    """, logger: logger)
                for (reason, count) in delta.failures.sorted(by: { $0.key < $1.key }) {
                    try await connection.query(
                        """
                        INSERT INTO notification_failure (notification_id, platform, reason, count)
                        VALUES (\(id), \(platform.rawValue), \(reason), \(Int64(count)))
                        ON CONFLICT (notification_id, platform, reason) DO UPDATE SET count = notification_failure.count + excluded.count
                        """, logger: logger)
                }
            }
            guard platforms.values.contains(where: { $0.pending != 0 }) else { continue }
            let open = try await connection.query(
                """
                SELECT coalesce(SUM(pending), 0)::bigint,
                       EXISTS (SELECT 1 FROM notification_failure WHERE notification_id = \(id) AND reason = 'Abandoned')
                FROM notification_platform WHERE notification_id = \(id)
                """, logger: logger
            ).collect()
            guard let (pending, abandoned) = try open.first?.decode((Int64, Bool).self), pending == 0 else { continue }
            let state: OutcomeState = abandoned ? .abandoned : .completed
            let changed = try await connection.query(
                """
                UPDATE notification SET state = \(state.rawValue), updated_at = \(at), finished_at = \(at),
                                        started_at = CASE started_at WHEN 0 THEN \(at) ELSE started_at END
                WHERE id = \(id) AND state = ANY(\(Outbox.unfinishedStateValues))
                RETURNING 1
                """, logger: logger
            ).collect()
            if changed.count == 1 { finished.append((id, state)) }
        }
        return finished
    }

    /// Runs `body` in one transaction, and again (up to 5 times) when PostgreSQL aborted it for a
    /// deadlock or a serialization failure: replicas' claims and results may cross on the same
    /// rows, and the database picks one to retry rather than letting both wait forever.
    func transactionRetryingConflicts<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await retryingConflicts(where: PostgresSQLDatabase.isConflict) { try await db.transaction(body) }
    }
}
