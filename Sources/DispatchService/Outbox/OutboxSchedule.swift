import Foundation
import GRDB
import HeraldModel
public import HeraldProto

/// Scheduled sends on SQLite: which are due (one process: no replica takes them). Storing,
/// cancelling and abandoning them are ``OutboxStore``'s, for both databases.
extension Outbox {
    /// The rule both stores apply before storing a scheduled send.
    static func checkScheduledRoom(pending: Int, maxPending: Int, hub: String) throws {
        guard pending < maxPending else {
            throw ServiceError.resourceExhausted(
                "hub \(hub) has \(pending) scheduled sends waiting, the most it may; cancel some or wait until they are made",
                retryAfterSeconds: 60)
        }
    }

    /// Scheduled sends due now, earliest first.
    public func dueScheduled(limit: Int) throws -> [(id: String, fireAt: Int64, request: [UInt8])] {
        try dueScheduled(limit: limit, at: now())
    }

    /// Scheduled sends due at `at` (Unix ms), earliest first.
    public func dueScheduled(limit: Int, at: Int64) throws -> [(id: String, fireAt: Int64, request: [UInt8])] {
        try db.read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql:
                        "SELECT notification_id, fire_at, request FROM scheduled_send WHERE fire_at <= ? ORDER BY fire_at LIMIT ?"
                ),
                arguments: [at, limit]
            ).map { row in
                let request: Data = row[2]
                return (row[0], row[1], [UInt8](request))
            }
        }
    }
}
