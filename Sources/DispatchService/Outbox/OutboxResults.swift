import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldTelemetry
import PushProviders

extension Outbox {
    // MARK: results

    /// Records a batch's results, and ends its `lease` (0: none); returns the notifications this
    /// finished.
    @discardableResult
    public func record(_ decisions: [Outbox.Decision], lease: Int64 = 0) async throws -> [(
        id: String, state: OutcomeState
    )] {
        guard !decisions.isEmpty || lease != 0 else { return [] }
        let at = now()
        return try await sql.transactionRetryingConflicts { session in
            let finished = try await self.apply(decisions, at: at, session)
            if lease != 0 { try await session.execute("DELETE FROM delivery_lease WHERE id = \(lease)") }
            return finished
        }
    }

    /// Records `decisions` that still hold (see above), their counters, handle removals, and the
    /// sends this finished, with their final state.
    func apply(
        _ decisions: [Outbox.Decision], at: Int64, _ session: any SQLSession
    ) async throws -> [(id: String, state: OutcomeState)] {
        guard !decisions.isEmpty else { return [] }
        let pending = DeliveryState.pending.rawValue
        let ids = Array(Set(decisions.map(\.notificationID))).sorted()
        // The sends' rows first, in one order for everyone: recording replicas take turns per send.
        if session.dialect == .postgres {
            _ = try await session.query(
                "SELECT id FROM notification WHERE id \(anyOf: ids) ORDER BY id \(SQLFragment.forUpdate)")
        }
        var holds = Set<Int64>()
        // Most of a batch is delivered alike: those rows take one statement per (status, attempt
        // counted now, attempt claimed); the rest go as rows, one run each on SQLite.
        var alike: [Outbox.DeliveredKey: [Int64]] = [:]
        var others: [Outbox.Decision] = []
        for d in decisions {
            if d.state == .delivered, d.removal == nil, d.reason.isEmpty {
                alike[
                    Outbox.DeliveredKey(status: d.status, countsAttempt: d.countsAttempt, attempt: d.attempt),
                    default: []
                ]
                .append(d.sequence)
            } else {
                others.append(d)
            }
        }
        for (key, sequences) in alike.sorted(by: { $0.value[0] < $1.value[0] }) {
            var update: SQLQuery = """
                UPDATE delivery SET state = \(DeliveryState.delivered.rawValue), leased_by = '', lease_id = 0, last_status = \(key.status),
                       reason = '', next_attempt_at = \(at), handle_removed = \(false), updated_at = \(at),
                       attempts = attempts + \(key.countsAttempt ? 1 : 0)
                WHERE sequence \(anyOf: sequences) AND state = \(pending) AND (\(key.attempt) = 0 OR attempts = \(key.attempt))
                """
            guard key.attempt == 0 else {
                update += " RETURNING sequence"
                for row in try await session.executeReturning(update) { holds.insert(try row[0]) }
                continue
            }
            // No claim to check (the rows were taken in this same transaction: local deliveries,
            // an erase): every one holds, and RETURNING would only cost a row read back per delivery.
            let changed = try await session.execute(update)
            guard changed == sequences.count else {
                throw ServiceError(
                    .aborted, "\(sequences.count - changed) deliveries changed under their own transaction")
            }
            holds.formUnion(sequences)
        }
        if !others.isEmpty {
            let rows = SQLRowSource(count: others.count)
                .integers("sequence", others.map(\.sequence))
                .integers("attempt", others.map { Int64($0.attempt) })
                .integers("state", others.map { Int64($0.state.rawValue) })
                .integers("status", others.map { Int64($0.status) })
                .texts("reason", others.map(\.reason))
                .integers("next_attempt_at", others.map(\.nextAttemptAt))
                .bools("removed", others.map { $0.removal != nil })
                .integers("counts", others.map { $0.countsAttempt ? 1 : 0 })
            for row in try await session.executeReturning(
                """
                UPDATE delivery SET state = u.state, leased_by = '', lease_id = 0, last_status = u.status, reason = u.reason,
                       next_attempt_at = u.next_attempt_at, handle_removed = u.removed, updated_at = \(at),
                       attempts = delivery.attempts + u.counts
                FROM \(rows: rows)
                WHERE delivery.sequence = u.sequence AND delivery.state = \(pending)
                  AND (u.attempt = 0 OR delivery.attempts = u.attempt)
                RETURNING delivery.sequence
                """)
            {
                holds.insert(try row[0])
            }
        }
        let held = decisions.filter { holds.contains($0.sequence) }
        let removals = held.compactMap(\.removal)
        if !removals.isEmpty {
            let rows = SQLRowSource(count: removals.count)
                .integers("platform", removals.map { Int64($0.platform.rawValue) })
                .texts("handle", removals.map(\.handle))
                .integers("since", removals.map(\.since))
            try await session.execute(
                """
                INSERT INTO handle_removal (platform, handle, invalid_since, created_at)
                SELECT u.platform, u.handle, u.since, \(at) FROM \(rows: rows) \(SQLRowSource.inOrder)
                """)
        }
        let deltas = Outbox.Delta.of(held)
        var finished: [(String, OutcomeState)] = []
        for id in ids {
            guard let platforms = deltas[id] else { continue }
            for (platform, delta) in platforms.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                try await session.execute(
                    """
                    UPDATE notification_platform
                    SET success = success + \(delta.success), failure = failure + \(delta.failure),
                        pending = pending + \(delta.pending), removed = removed + \(delta.removed),
                        retries = retries + \(delta.retries)
                    WHERE notification_id = \(id) AND platform = \(platform.rawValue)
                    """)
                for (reason, count) in delta.failures.sorted(by: { $0.key < $1.key }) {
                    try await session.execute(
                        """
                        INSERT INTO notification_failure (notification_id, platform, reason, count)
                        VALUES (\(id), \(platform.rawValue), \(reason), \(count))
                        ON CONFLICT (notification_id, platform, reason) DO UPDATE SET count = notification_failure.count + excluded.count
                        """)
                }
            }
            guard platforms.values.contains(where: { $0.pending != 0 }) else { continue }
            guard
                let open = try await session.queryFirst(
                    """
                    SELECT CAST(COALESCE(SUM(pending), 0) AS BIGINT),
                           EXISTS (SELECT 1 FROM notification_failure WHERE notification_id = \(id) AND reason = 'Abandoned')
                    FROM notification_platform WHERE notification_id = \(id)
                    """), try open[0] as Int64 == 0
            else { continue }
            let state: OutcomeState = try open[1] as Bool ? .abandoned : .completed
            let changed = try await session.execute(
                """
                UPDATE notification SET state = \(state.rawValue), updated_at = \(at), finished_at = \(at),
                                        started_at = CASE started_at WHEN 0 THEN \(at) ELSE started_at END
                WHERE id = \(id) AND state \(anyOf: Outbox.unfinishedStateValues.map(Int64.init))
                """)
            if changed == 1 { finished.append((id, state)) }
        }
        return finished
    }
}
