import GRDB
import HeraldModel
public import HeraldProto

/// Recording what the worker decided for each delivery, and the counters an outcome is read from.
extension Outbox {
    /// Where one delivery goes next, as the worker decided it.
    public struct Decision: Sendable {
        public var sequence: Int64
        public var notificationID: String
        public var platform: Platform
        public var state: DeliveryState
        public var status: Int
        public var reason: String
        /// Pending: when to try again, Unix ms.
        public var nextAttemptAt: Int64
        /// Set when the handle is dead and registration must delete it.
        public var removal: (platform: Platform, handle: String, since: Int64)?
        /// The attempt was not counted when claimed (local deliveries take no lease): count it now.
        public var countsAttempt = false
        /// The attempt the claim counted (``PushItem/attempt``): on PostgreSQL the result holds
        /// only while the row is still at it (its lease was not taken over). 0: no claim (local).
        public var attempt = 0
    }

    /// The results of deliveries written to the inbox in their claim's own transaction: delivered,
    /// their attempt counted now (they took no lease); and how many per platform.
    static func deliveredLocally(_ items: [PushItem], at: Int64) -> (delivered: [Platform: Int], decisions: [Decision])
    {
        var delivered: [Platform: Int] = [:]
        let decisions = items.map { item in
            delivered[item.platform, default: 0] += 1
            return Decision(
                sequence: item.sequence, notificationID: item.notificationID, platform: item.platform,
                state: .delivered,
                status: 200, reason: "", nextAttemptAt: at, removal: nil, countsAttempt: true)
        }
        return (delivered, decisions)
    }

    /// Counter changes of one (notification, platform), applied once per batch.
    struct Delta {
        var success = 0, failure = 0, pending = 0, removed = 0, retries = 0
        var failures: [String: Int] = [:]

        /// The counter changes `decisions` make, per notification and platform.
        static func of(_ decisions: [Decision]) -> [String: [Platform: Delta]] {
            var deltas: [String: [Platform: Delta]] = [:]
            for d in decisions {
                var delta = deltas[d.notificationID]?[d.platform] ?? Delta()
                switch d.state {
                case .pending: delta.retries += 1
                case .delivered:
                    delta.success += 1
                    delta.pending -= 1
                default:
                    delta.failure += 1
                    delta.pending -= 1
                    delta.failures[d.state == .abandoned ? "Abandoned" : d.reason, default: 0] += 1
                    if d.removal != nil { delta.removed += 1 }
                }
                deltas[d.notificationID, default: [:]][d.platform] = delta
            }
            return deltas
        }
    }

    private struct DeliveredKey: Hashable {
        var status: Int
        var countsAttempt: Bool
    }

    /// Records a batch's results, queues handle removals, and finishes each notification that has
    /// nothing pending any more. Returns the notifications finished, with their final state.
    @discardableResult
    public func record(_ decisions: [Decision]) async throws -> [(id: String, state: OutcomeState)] {
        let at = now()
        return try await sqlite.write { db in try self.apply(decisions, at: at, db) }
    }

    func apply(_ decisions: [Decision], at: Int64, _ db: Database) throws -> [(id: String, state: OutcomeState)] {
        let update = try db.cachedStatement(
            sql: """
                UPDATE delivery SET state = ?, leased = 0, last_status = ?, reason = ?, next_attempt_at = ?,
                       handle_removed = ?, updated_at = ?, attempts = attempts + ?
                WHERE sequence = ?
                """)
        // Most of a batch is delivered with the same status: those rows take one statement per
        // (status, countsAttempt); the rest one each.
        var delivered: [DeliveredKey: [Int64]] = [:]
        for d in decisions {
            if d.state == .delivered, d.removal == nil, d.reason.isEmpty {
                delivered[DeliveredKey(status: d.status, countsAttempt: d.countsAttempt), default: []].append(
                    d.sequence)
            } else {
                try update.execute(arguments: [
                    d.state.rawValue, d.status, d.reason, d.nextAttemptAt, d.removal == nil ? 0 : 1, at,
                    d.countsAttempt ? 1 : 0,
                    d.sequence,
                ])
            }
            if let removal = d.removal {
                try db.execute(
                    sql: "INSERT INTO handle_removal (platform, handle, invalid_since, created_at) VALUES (?, ?, ?, ?)",
                    arguments: [removal.platform.rawValue, removal.handle, removal.since, at])
            }
        }
        if !delivered.isEmpty {
            let updateDelivered = try db.cachedStatement(
                sql: """
                    UPDATE delivery SET state = \(DeliveryState.delivered.rawValue), leased = 0, last_status = ?, reason = '',
                           next_attempt_at = ?, handle_removed = 0, updated_at = ?, attempts = attempts + ?
                    WHERE sequence IN (SELECT value FROM json_each(?))
                    """)
            for (key, sequences) in delivered {
                try updateDelivered.execute(arguments: [
                    key.status, at, at, key.countsAttempt ? 1 : 0, Self.jsonList(sequences),
                ])
            }
        }
        let counters = try db.cachedStatement(
            sql: """
                UPDATE notification_platform
                SET success = success + ?, failure = failure + ?, pending = pending + ?, removed = removed + ?,
                    retries = retries + ?
                WHERE notification_id = ? AND platform = ?
                """)
        let failures = try db.cachedStatement(
            sql: """
                INSERT INTO notification_failure (notification_id, platform, reason, count) VALUES (?, ?, ?, ?)
                ON CONFLICT (notification_id, platform, reason) DO UPDATE SET count = count + excluded.count
                """)
        var finished: [(String, OutcomeState)] = []
        for (id, platforms) in Delta.of(decisions) {
            for (platform, delta) in platforms {
                try counters.execute(arguments: [
                    delta.success, delta.failure, delta.pending, delta.removed, delta.retries, id, platform.rawValue,
                ])
                for (reason, count) in delta.failures {
                    try failures.execute(arguments: [id, platform.rawValue, reason, count])
                }
            }
            guard platforms.values.contains(where: { $0.pending != 0 }) else { continue }
            let open =
                try Int.fetchOne(
                    db.cachedStatement(sql: "SELECT SUM(pending) FROM notification_platform WHERE notification_id = ?"),
                    arguments: [id]) ?? 0
            guard open == 0 else { continue }
            let abandoned =
                try Bool.fetchOne(
                    db.cachedStatement(
                        sql:
                            "SELECT EXISTS (SELECT 1 FROM notification_failure WHERE notification_id = ? AND reason = 'Abandoned')"
                    ),
                    arguments: [id]) ?? false
            let state: OutcomeState = abandoned ? .abandoned : .completed
            try db.execute(
                sql: """
                    UPDATE notification SET state = ?, updated_at = ?, finished_at = ?,
                                            started_at = CASE started_at WHEN 0 THEN ? ELSE started_at END
                    WHERE id = ? AND state IN (\(Outbox.unfinishedStates))
                    """,
                arguments: [state.rawValue, at, at, at, id])
            if db.changesCount == 1 { finished.append((id, state)) }
        }
        return finished
    }
}
