import Foundation
import GRDB
public import HeraldModel
public import HeraldProto
import PostgresNIO

/// Erase, dispatch's part, on both stores (see EraseUser and EraseDevices in dispatch.proto).
///
/// Sends: a scheduled send whose only target is the user is cancelled; the user's name goes from
/// every send as sender and as target; a finished send to the user alone loses its payloads and
/// the body NH's telemetry keeps. A send still being delivered keeps its payloads until it
/// finishes (the caller runs this step again at the end of an erase) or the retention purges it.
///
/// Devices: a delivery to one not yet attempted fails with reason "Erased", through the same
/// recording as a push service's answer, so the send's counters and state stay right; every
/// delivery to them keeps its state with registration id and handle blanked; their inbox entries,
/// staged audience rows and handle removals are deleted. A delivery in flight (leased) is left
/// alone and counted: the caller asks again once its result is in.
///
/// The delivery table has no index on registration id (one would cost every send's fan-out), so
/// each page scans it: an erase is rare, and the outbox holds what its retention keeps.
public struct ErasedRows: Sendable, Equatable {
    public var removed: Int64 = 0
    public var redacted: Int64 = 0
    /// Deliveries to the devices still in flight: the page must be asked again.
    public var inFlight: Int64 = 0

    public init(removed: Int64 = 0, redacted: Int64 = 0, inFlight: Int64 = 0) {
        self.removed = removed
        self.redacted = redacted
        self.inFlight = inFlight
    }
}

enum OutboxErasure {
    static let reason = "Erased"
    static let maxDevices = 1000

    static func tags(of user: String) -> [String] { Names.userSystemTags(of: user) }

    static func decisions(
        _ rows: [(sequence: Int64, notificationID: String, platform: Platform, attempt: Int)], at: Int64
    )
        -> [Outbox.Decision]
    {
        rows.map {
            Outbox.Decision(
                sequence: $0.sequence, notificationID: $0.notificationID, platform: $0.platform, state: .failed,
                status: 0, reason: reason, nextAttemptAt: at, removal: nil, attempt: $0.attempt)
        }
    }
}

extension Outbox {
    public func eraseDevices(_ devices: [UserDevice]) async throws -> ErasedRows {
        guard !devices.isEmpty else { return ErasedRows() }
        let at = now()
        let ids = String(decoding: try JSONEncoder().encode(devices.map(\.registrationID)), as: UTF8.self)
        let handles = String(
            decoding: try JSONEncoder().encode(devices.map(\.handle).filter { !$0.isEmpty }), as: UTF8.self)
        let ofDevices = "registration_id IN (SELECT value FROM json_each(?))"
        let pending = DeliveryState.pending.rawValue
        return try await sqlite.write { db in
            var erased = ErasedRows()
            // Not leased: no worker holds it, and none can claim it before this transaction ends.
            let rows = try Row.fetchAll(
                db,
                sql:
                    "SELECT sequence, notification_id, platform FROM delivery WHERE \(ofDevices) AND state = ? AND leased = 0",
                arguments: [ids, pending]
            ).map {
                (
                    sequence: $0["sequence"] as Int64, notificationID: $0["notification_id"] as String,
                    platform: Platform(rawValue: $0["platform"]), attempt: 0
                )
            }
            _ = try self.apply(OutboxErasure.decisions(rows, at: at), at: at, db)
            erased.inFlight =
                try Int64.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM delivery WHERE \(ofDevices) AND state = ?",
                    arguments: [ids, pending]) ?? 0
            try db.execute(
                sql: "UPDATE delivery SET registration_id = '', handle = '' WHERE \(ofDevices) AND state <> ?",
                arguments: [ids, pending])
            erased.redacted += Int64(db.changesCount)
            for table in ["inbox", "audience_staging"] {
                try db.execute(sql: "DELETE FROM \(table) WHERE \(ofDevices)", arguments: [ids])
                erased.removed += Int64(db.changesCount)
            }
            try db.execute(
                sql: "DELETE FROM handle_removal WHERE handle IN (SELECT value FROM json_each(?))", arguments: [handles]
            )
            erased.removed += Int64(db.changesCount)
            return erased
        }
    }
}

extension PostgresOutbox {
    public func eraseDevices(_ devices: [UserDevice]) async throws -> ErasedRows {
        guard !devices.isEmpty else { return ErasedRows() }
        let at = now()
        let ids = devices.map(\.registrationID)
        let handles = devices.map(\.handle).filter { !$0.isEmpty }
        let pending = DeliveryState.pending.rawValue
        let logger = db.logger
        return try await transactionRetryingConflicts { connection in
            var erased = ErasedRows()
            // Not leased, or its lease ran out: no replica holds it; locked here, none claims it.
            let rows = try await connection.query(
                """
                SELECT sequence, notification_id, platform, attempts FROM delivery
                WHERE registration_id = ANY(\(ids)) AND state = \(pending) AND (leased_by = '' OR next_attempt_at <= \(at))
                ORDER BY sequence FOR UPDATE SKIP LOCKED
                """, logger: logger
            ).collect()
            var due: [(sequence: Int64, notificationID: String, platform: Platform, attempt: Int)] = []
            for row in rows {
                let (sequence, notification, platform, attempts) = try row.decode((Int64, String, Int32, Int32).self)
                due.append((sequence, notification, Platform(rawValue: platform), Int(attempts)))
            }
            _ = try await self.apply(OutboxErasure.decisions(due, at: at), at: at, connection, logger: logger)
            erased.inFlight =
                try await connection.query(
                    "SELECT COUNT(*) FROM delivery WHERE registration_id = ANY(\(ids)) AND state = \(pending)",
                    logger: logger
                ).collect().first?.decode(Int64.self) ?? 0
            erased.redacted += Int64(
                try await connection.query(
                    """
                    UPDATE delivery SET registration_id = '', handle = ''
                    WHERE registration_id = ANY(\(ids)) AND state <> \(pending) RETURNING sequence
                    """, logger: logger
                ).collect().count)
            erased.removed += Int64(
                try await connection.query(
                    "DELETE FROM inbox WHERE registration_id = ANY(\(ids)) RETURNING sequence", logger: logger
                ).collect().count)
            erased.removed += Int64(
                try await connection.query(
                    "DELETE FROM audience_staging WHERE registration_id = ANY(\(ids)) RETURNING position",
                    logger: logger
                ).collect().count)
            erased.removed += Int64(
                try await connection.query(
                    "DELETE FROM handle_removal WHERE handle = ANY(\(handles)) RETURNING id", logger: logger
                ).collect().count)
            return erased
        }
    }
}

/// One send a user made or that was addressed to them: an export's row.
public struct SendRecord: Sendable {
    public var id: String
    public var hub: String
    public var sender: String
    public var targetUser: String
    public var targetTag: String
    public var state: OutcomeState
    public var createdAt: Int64
    public var finishedAt: Int64
}

/// One delivery record to one of a user's devices: an export's row.
public struct DeviceDelivery: Sendable {
    public var sequence: Int64
    public var notificationID: String
    public var registrationID: String
    public var platform: Platform
    public var handle: String
    public var state: DeliveryState
    public var attempts: Int32
    public var lastStatus: Int32
    public var reason: String
    public var updatedAt: Int64
}
