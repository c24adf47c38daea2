import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldTelemetry
import PushProviders

extension Outbox {
    // MARK: erasure

    /// Erase, devices: see ``ErasedRows`` and EraseDevices in dispatch.proto.
    public func eraseDevices(_ devices: [UserDevice]) async throws -> ErasedRows {
        guard !devices.isEmpty else { return ErasedRows() }
        let at = now()
        let ids = devices.map(\.registrationID)
        let handles = devices.map(\.handle).filter { !$0.isEmpty }
        let pending = DeliveryState.pending.rawValue
        return try await sql.transactionRetryingConflicts { session in
            var erased = ErasedRows()
            // Not leased, or its batch's lease ran out: no process holds it; locked here, none claims it.
            let due = try await session.query(
                """
                SELECT sequence, notification_id, platform, attempts FROM delivery
                WHERE registration_id \(anyOf: ids) AND state = \(pending)
                  AND (leased_by = '' OR (next_attempt_at <= \(at) AND NOT EXISTS (
                       SELECT 1 FROM delivery_lease l WHERE l.id = delivery.lease_id AND l.expires_at > \(at))))
                ORDER BY sequence \(SQLFragment.skipLocked)
                """
            ).map { row in
                (
                    sequence: try row[0] as Int64, notificationID: try row[1] as String,
                    platform: Platform(rawValue: try row[2]), attempt: try row[3] as Int
                )
            }
            _ = try await self.apply(OutboxErasure.decisions(due, at: at), at: at, session)
            erased.inFlight =
                try await session.queryFirst(
                    "SELECT COUNT(*) FROM delivery WHERE registration_id \(anyOf: ids) AND state = \(pending)")?[0] ?? 0
            erased.redacted += Int64(
                try await session.execute(
                    """
                    UPDATE delivery SET registration_id = '', handle = ''
                    WHERE registration_id \(anyOf: ids) AND state <> \(pending)
                    """))
            for table in ["inbox", "audience_staging"] {
                erased.removed += Int64(
                    try await session.execute("DELETE FROM \(raw: table) WHERE registration_id \(anyOf: ids)"))
            }
            erased.removed += Int64(
                try await session.execute("DELETE FROM handle_removal WHERE handle \(anyOf: handles)"))
            return erased
        }
    }
}
