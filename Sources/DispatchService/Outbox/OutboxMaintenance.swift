import GRDB
public import HeraldProto
import HeraldRPC
import HeraldService

/// The SQLite outbox's next due delivery and the queue's depth for metrics.
extension Outbox {
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
