import Foundation
import GRDB
import HeraldModel
public import HeraldProto

/// Scheduled sends: stored with their request until due, then made through
/// ``enqueue(id:sender:targetUser:targetTag:payloads:targets:retryWindow:hub:scheduled:)``.
extension Outbox {
    /// Stores a send to be made at `fireAt` (Unix ms): its notification (SCHEDULED) and the
    /// request, in one transaction, before Send answers; refused when `hub` already has
    /// `maxPending` waiting (a Send key must not be able to fill the disk).
    public func schedule(
        id: String, sender: String, targetUser: String, targetTag: String, hub: String, fireAt: Int64, request: [UInt8],
        originalBody: [UInt8] = [], maxPending: Int = .max
    ) async throws -> Int64 {
        let at = now()
        let traceParent = Self.currentTraceParent
        try await db.write { db in
            let pending =
                try Int.fetchOne(
                    db,
                    sql:
                        "SELECT COUNT(*) FROM scheduled_send s JOIN notification n ON n.id = s.notification_id WHERE n.hub = ?",
                    arguments: [hub]) ?? 0
            try Self.checkScheduledRoom(pending: pending, maxPending: maxPending, hub: hub)
            try db.execute(
                sql: """
                    INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at, hub, original_body,
                                              trace_parent)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    id, sender, targetUser, targetTag, OutcomeState.scheduled.rawValue, at, at, hub, Data(originalBody),
                    traceParent,
                ])
            try db.execute(
                sql: "INSERT INTO scheduled_send (notification_id, fire_at, request) VALUES (?, ?, ?)",
                arguments: [id, fireAt, Data(request)])
        }
        return at
    }

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
        try try db.read { db in
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

    /// Cancels a scheduled send not made yet (its outcome becomes CANCELLED); the same answer when
    /// it was cancelled before. NOT_FOUND for an unknown id (or another hub's, with `hub`);
    /// FAILED_PRECONDITION once it was made.
    public func cancelScheduled(_ id: String, hub: String = "") async throws -> Outcome {
        let at = now()
        try await db.write { db in
            let row = try Self.notification(id, requester: "", hub: hub, db)
            try db.execute(sql: "DELETE FROM scheduled_send WHERE notification_id = ?", arguments: [id])
            if db.changesCount == 1 {
                try db.execute(
                    sql: "UPDATE notification SET state = ?, updated_at = ?, finished_at = ? WHERE id = ?",
                    arguments: [OutcomeState.cancelled.rawValue, at, at, id])
            } else if OutcomeState(rawValue: row["state"]) != .cancelled {
                throw ServiceError(
                    .failedPrecondition, "notification \(id) was already sent; only a scheduled send can be cancelled")
            }
        }
        return try await outcome(of: id, hub: hub)
    }

    /// Cancels every scheduled send of `hub` not made yet (a deleted hub's); returns how many.
    public func cancelScheduled(hub: String) async throws -> Int64 {
        let at = now()
        return try await db.write { db in
            // Two set-based statements in one transaction, as PostgreSQL's does in one.
            try db.execute(
                sql: """
                    UPDATE notification SET state = ?, updated_at = ?, finished_at = ?
                    WHERE hub = ? AND id IN (SELECT notification_id FROM scheduled_send)
                    """,
                arguments: [OutcomeState.cancelled.rawValue, at, at, hub])
            let cancelled = Int64(db.changesCount)
            try db.execute(
                sql: "DELETE FROM scheduled_send WHERE notification_id IN (SELECT id FROM notification WHERE hub = ?)",
                arguments: [hub])
            return cancelled
        }
    }

    /// Gives up a scheduled send whose stored request cannot be made (ABANDONED); nothing is sent.
    public func abandonScheduled(_ id: String) async throws {
        let at = now()
        try await db.write { db in
            try db.execute(sql: "DELETE FROM scheduled_send WHERE notification_id = ?", arguments: [id])
            guard db.changesCount == 1 else { return }
            try db.execute(
                sql: "UPDATE notification SET state = ?, updated_at = ?, finished_at = ? WHERE id = ?",
                arguments: [OutcomeState.abandoned.rawValue, at, at, id])
        }
    }
}
