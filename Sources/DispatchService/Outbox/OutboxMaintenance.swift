import GRDB
public import HeraldProto
import HeraldRPC
import HeraldService

/// Purging old sends, the dead-handle queue, and the queue's depth for metrics.
extension Outbox {
    /// Deletes finished sends last changed before `before` (Unix ms): the notification, and by
    /// cascade its payloads, deliveries and counters. A hundred sends per transaction, so a purge
    /// of large sends never holds the writer long. Returns how many sends.
    @discardableResult
    public func purge(before: Int64) throws -> Int {
        try HeraldDatabase.deleteInBatches(
            db, batch: 100,
            sql: """
                DELETE FROM notification WHERE id IN (
                    SELECT id FROM notification WHERE state IN (\(Outbox.finishedStates)) AND updated_at < ? LIMIT 100)
                """,
            arguments: [before])
    }

    /// Deletes every finished send of `hub` with its payloads, deliveries and counters.
    public func purge(hub: String) throws -> Int {
        try HeraldDatabase.deleteInBatches(
            db, batch: 100,
            sql: """
                DELETE FROM notification WHERE id IN (
                    SELECT id FROM notification WHERE state IN (\(Outbox.finishedStates)) AND hub = ? LIMIT 100)
                """,
            arguments: [hub])
    }

    /// Deletes every send with its payloads, deliveries and counters, and the dead-handle queue
    /// (ResetForTests). A delivery a worker holds at that moment records its result into nothing.
    public func deleteEverything() throws -> Int64 {
        try TestMode.deleteAll(
            [
                "delivery", "notification_failure", "notification_platform", "outbox_payload", "scheduled_send",
                "notification",
                "handle_removal",
            ], in: db)
    }

    /// Dead handles registration has not confirmed deleting yet, oldest first.
    public func pendingRemovals(limit: Int) throws -> [(id: Int64, platform: Platform, handle: String, since: Int64)] {
        try db.read { db in
            try Row.fetchAll(
                db, sql: "SELECT id, platform, handle, invalid_since FROM handle_removal ORDER BY id LIMIT ?",
                arguments: [limit]
            ).map { ($0["id"], Platform(rawValue: $0["platform"]), $0["handle"], $0["invalid_since"]) }
        }
    }

    public func removalDone(_ id: Int64) throws {
        try db.write { db in try db.execute(sql: "DELETE FROM handle_removal WHERE id = ?", arguments: [id]) }
    }

    /// When the earliest pending, unleased delivery is due (Unix ms), if any: the least of each
    /// platform's first entry in `delivery_due` (one look-up each, never a scan).
    public func nextDue() throws -> Int64? {
        try db.read { db in
            let statement = try db.cachedStatement(
                sql: """
                    SELECT MIN(next_attempt_at) FROM delivery
                    WHERE state = \(DeliveryState.pending.rawValue) AND leased = 0 AND platform = ?
                    """)
            return try Platform.delivered.compactMap { try Int64.fetchOne(statement, arguments: [$0.rawValue]) }.min()
        }
    }

    public func traceParents(of ids: [String]) throws -> [String: String] {
        try db.read { db in
            var parents: [String: String] = [:]
            let marks = Array(repeating: "?", count: ids.count).joined(separator: ",")
            let rows = try Row.fetchAll(
                db, sql: "SELECT id, trace_parent FROM notification WHERE id IN (\(marks)) AND trace_parent <> ''",
                arguments: StatementArguments(ids))
            for row in rows { parents[row[0]] = row[1] as String }
            return parents
        }
    }

    /// The traceparent a send made now stores: the current span's, '' when not traced.
    static var currentTraceParent: String { HeraldTracing.currentHeaders?.traceparent ?? "" }

    /// Deliveries not finished yet, and handle removals not confirmed yet (for metrics).
    public func depth() throws -> OutboxDepth {
        try db.read { db in
            OutboxDepth(
                // The open sends' counters (open sends from `notification_open`), not COUNT(*) over
                // `delivery`: no index holds every pending row (`delivery_due` leaves out leased
                // ones), and a scan of a table that keeps days of finished deliveries, every
                // second, grows with the retention.
                pending: try Int.fetchOne(
                    db,
                    sql: """
                        SELECT COALESCE(SUM(pending), 0) FROM notification_platform
                        WHERE notification_id IN (SELECT id FROM notification WHERE state IN (\(Outbox.unfinishedStates)))
                        """) ?? 0,
                removals: try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM handle_removal") ?? 0,
                oldestOpenSend: try Int64.fetchOne(
                    db, sql: "SELECT MIN(created_at) FROM notification WHERE state IN (1, 2)"))
        }
    }
}
