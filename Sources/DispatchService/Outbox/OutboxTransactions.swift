import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldTelemetry
public import PushProviders

/// The outbox's claims and leases, written once for both databases over ``Outbox/sql``, as are
/// its sends and staged audiences (OutboxSends.swift), results (OutboxResults.swift) and the
/// erasing of devices (OutboxDeviceErasure.swift).
///
/// **Leases** are the same on both, one per claimed batch: a claim writes a `delivery_lease` row
/// (its holder and when it ends), counts each delivery's attempt, names this process in
/// `leased_by`, points `lease_id` at that row and moves `next_attempt_at` to the lease's first
/// end. The row stays in `delivery_due`: when `next_attempt_at` passes, the next claim takes it
/// over if its batch's lease has ended too (with its message id, its attempt counted again, so
/// it shows as retried), and otherwise moves it on to the lease's current end. So a renewal
/// rewrites one small row per batch, never the batch's deliveries: renewing stays cheap when the
/// machine is busy, which is when it matters. The worker renews what it holds every
/// ``Outbox/leaseRenewalInterval``, and a restart takes its own leases back at once
/// (``Outbox/recoverLeases()``).
///
/// **A result counts once**: it updates its row only while the row is still pending at the attempt
/// its claim counted, so a result whose lease was taken over is dropped and the counters add up
/// to the audience. **A send finishes once**: recording locks the sends' rows first, in id order.
///
/// What differs between the databases stays behind the seam (``SQLFragment/skipLocked``,
/// ``SQLFragment/forUpdate``, row sources, `anyOf:`) or in two properties: whether replicas share
/// the database (``Outbox/sharedByReplicas``), and what a committed send tells them
/// (``Outbox/sendCommittedNotice(hub:platforms:)``).
extension Outbox {
    /// A sixth of the lease: a renewal is one small row per batch in flight, and five in a row
    /// may be late or fail (a stalled database, a busy machine) before a live process loses what
    /// it holds.
    public var leaseRenewalInterval: Duration { lease / 6 }

    /// Whose leases a restart takes back: on PostgreSQL this replica's own (the others' are theirs
    /// until they expire); on SQLite every one, the file having one process.
    func mine(_ column: String) -> SQLQuery {
        sharedByReplicas ? "\(raw: column) = \(replica)" : "\(raw: column) <> ''"
    }

    // MARK: claims and leases

    /// The traceparent a send made now stores: the current span's, '' when not traced or not
    /// sampled (its deliveries would record nothing under it).
    static var currentTraceParent: String { HeraldTracing.currentSampledTraceParent ?? "" }

    /// Deliveries not finished yet, and handle removals not confirmed yet (for metrics), sampled
    /// each second. Pending deliveries are the open sends' counters (open sends from
    /// `notification_open`), not a count of `delivery`'s pending rows, which grows with a backlog.
    public func depth() async throws -> OutboxDepth {
        guard
            let row = try await sql.queryFirst(
                """
                SELECT (SELECT CAST(COALESCE(SUM(pending), 0) AS BIGINT) FROM notification_platform
                        WHERE notification_id IN (SELECT id FROM notification WHERE state IN (1, 2))),
                       (SELECT COUNT(*) FROM handle_removal),
                       (SELECT MIN(created_at) FROM notification WHERE state IN (1, 2))
                """)
        else { return OutboxDepth(pending: 0, removals: 0, oldestOpenSend: nil) }
        return OutboxDepth(pending: try row[0], removals: try row[1], oldestOpenSend: try row[2])
    }

    /// Takes back the leases a previous run of this process left (due now, their attempt already
    /// counted, so they show as retried), and the scheduled sends it had taken and not made (due
    /// again now, not when the take ends). Call once at start-up, before any worker runs.
    @discardableResult
    public func recoverLeases() async throws -> Int {
        let at = now()
        let leases = mine("leased_by")
        let takes = mine("taken_by")
        let holders = mine("holder")
        return try await sql.transactionRetryingConflicts { session in
            let rows = try await session.executeReturning(
                """
                UPDATE delivery SET leased_by = '', lease_id = 0, next_attempt_at = \(at)
                WHERE state = \(DeliveryState.pending.rawValue) AND \(leases)
                RETURNING notification_id, platform
                """)
            try await session.execute("DELETE FROM delivery_lease WHERE \(holders)")
            try await Self.countRetries(
                try rows.map { (try $0[0] as String, Platform(rawValue: try $0[1])) }, session)
            try await session.execute("UPDATE scheduled_send SET taken_until = 0, taken_by = '' WHERE \(takes)")
            return rows.count
        }
    }

    /// A claimed batch: its deliveries and the lease that holds them.
    public struct ClaimedBatch: Sendable {
        public var items: [PushItem]
        /// The batch's `delivery_lease` row; 0 when nothing was claimed.
        public var lease: Int64
        /// When the lease ends unless renewed, Unix ms, by this process's clock.
        public var leaseEnds: Int64
        /// How many of `items` another holder's lease had held until it ended.
        public var takenOver = 0

        /// Nothing claimed.
        public static let empty = ClaimedBatch(items: [], lease: 0, leaseEnds: 0)
    }

    /// Claims up to `limit` due deliveries of `platforms`: counts their attempt and leases them, in
    /// one transaction.
    public func claim(limit: Int, platforms: [Platform]) async throws -> [PushItem] {
        try await claimBatch(limit: limit, platforms: platforms).items
    }

    /// ``claim(limit:platforms:)`` with the batch's lease, for the worker that renews it. `room`:
    /// at most this many rows of each hub it names (0: none; the delivery worker's per-hub caps);
    /// `personalOnly`: hubs of which only the personal lane is read; `onlyPersonal`: of every hub
    /// (the delivery worker's fast lane), leaving the claims' place in the hubs' rotation as it was.
    public func claimBatch(
        limit: Int, platforms: [Platform], room: [String: Int] = [:], personalOnly: Set<String> = [],
        onlyPersonal: Bool = false
    ) async throws -> ClaimedBatch {
        let at = now()
        return try await sql.transactionRetryingConflicts { session in
            try await self.take(
                limit: limit, platforms: platforms, leasing: true, at: at, room: room, personalOnly: personalOnly,
                onlyPersonal: onlyPersonal, session)
        }
    }

    /// Gives leases `ids` of this process a full ``lease`` from now: one row per batch, however
    /// many deliveries it holds. Returns the ids renewed and their new end (Unix ms); an id not
    /// returned was recorded, or taken back by a restart. A lease that had already ended is
    /// renewed too: what no other replica took over yet stays this process's, and what was taken
    /// over points at the taker's lease, which this does not touch.
    public func renewLeases(_ ids: [Int64]) async throws -> (renewed: Set<Int64>, until: Int64) {
        guard !ids.isEmpty else { return ([], 0) }
        let until = now() + lease.wholeMilliseconds
        var statement = renewal(of: ids, until: until)
        statement += " RETURNING id"
        let rows = try await leaseSQL.executeReturning(statement)
        return (Set(try rows.map { try $0[0] as Int64 }), until)
    }

    /// The statement that moves this process's leases `ids` to `until`.
    private func renewal(of ids: [Int64], until: Int64) -> SQLQuery {
        "UPDATE delivery_lease SET expires_at = \(until) WHERE id \(anyOf: ids) AND holder = \(replica)"
    }

    /// Renews lease `id` and returns which of `sequences` it still holds: for a batch whose lease
    /// may have ended before its pushes went out, so that what another replica took over is not
    /// pushed twice.
    public func confirmLease(_ id: Int64, sequences: [Int64]) async throws -> (held: Set<Int64>, until: Int64) {
        let until = now() + lease.wholeMilliseconds
        return try await leaseSQL.transactionRetryingConflicts { session in
            guard try await session.execute(self.renewal(of: [id], until: until)) == 1 else { return ([], until) }
            let rows = try await session.query(
                """
                SELECT sequence FROM delivery
                WHERE sequence \(anyOf: sequences) AND lease_id = \(id) AND state = \(DeliveryState.pending.rawValue)
                """)
            return (Set(try rows.map { try $0[0] as Int64 }), until)
        }
    }

    /// Claims, records in `inbox` and records as delivered up to `limit` due deliveries of
    /// `platforms`, in one transaction: exactly once, with no lease. Returns how many, per
    /// platform, and the notifications this finished.
    public func deliverLocally(
        limit: Int, platforms: [Platform], inbox: InboxProvider
    ) async throws -> (delivered: [Platform: Int], finished: [(id: String, state: OutcomeState)]) {
        let at = now()
        return try await sql.transactionRetryingConflicts { session in
            let items = try await self.take(limit: limit, platforms: platforms, leasing: false, at: at, session).items
            guard !items.isEmpty else { return ([:], []) }
            try await inbox.write(items, in: session)
            let (delivered, decisions) = Outbox.deliveredLocally(items, at: at)
            return (delivered, try await self.apply(decisions, at: at, session))
        }
    }

    /// Due deliveries of `platforms`, shared fairly among hubs (``FairClaims``): each hub's
    /// personal lane first, then its bulk lane, oldest first across the platforms within a lane;
    /// with `leasing`, each is leased and its attempt counted. Each lane of each hub is read as one
    /// ordered range of `delivery_due` (platform, hub, lane, next_attempt_at, sequence): a claim
    /// for the inbox's platforms does not walk a backlog of APNs rows, nor one hub's claim another
    /// hub's backlog. On PostgreSQL the rows are locked for this transaction and skipped by
    /// everyone else's; rows read but not taken stay locked only until it ends. Rows whose batch's
    /// lease had run out count as retried; rows whose batch's lease was renewed are not taken but
    /// moved on to its end. The lease starts when the rows are written, after the reads: a claim
    /// slowed by a busy machine does not hand its worker a lease already half gone.
    ///
    /// `room` caps the rows taken of the hubs it names (a hub with 0 is left out, as if it had
    /// none due): the delivery worker's way to keep one hub from holding more of its batches, or
    /// of its provider requests, than its share. Of the hubs in `personalOnly`, only their
    /// personal lane is read: a hub at its window of batches still has its one-person sends
    /// claimed, instead of waiting for one of its broadcast's batches to finish. With
    /// `onlyPersonal`, only the personal lanes of all hubs are read, and the cursor stays.
    func take(
        limit: Int, platforms: [Platform], leasing: Bool, at: Int64, room: [String: Int] = [:],
        personalOnly: Set<String> = [], onlyPersonal: Bool = false, _ session: any SQLSession
    ) async throws -> ClaimedBatch {
        guard !platforms.isEmpty, limit > 0 else { return .empty }
        let cursor = claimCursor.withLock { $0 }
        let (pendingByPlatform, reused) = try await discoverHubs(platforms, after: cursor, session)
        let active = pendingByPlatform.values.reduce(into: Set<String>()) { $0.formUnion($1) }
            .filter { (room[$0] ?? 1) > 0 }
        let served = FairClaims.order(active, after: cursor)
        guard !served.isEmpty else { return .empty }
        if !onlyPersonal { claimCursor.withLock { $0 = FairClaims.cursor(serving: served, of: active.count) } }
        // A hub's next `count` due rows after `mark` (the last row taken from it, with its lane):
        // its personal lane, then its bulk lane.
        typealias Mark = (lane: DeliveryLane, due: Int64, sequence: Int64)
        func rows(of hub: String, count: Int, after mark: Mark?) async throws -> (rows: [Claimed], mark: Mark?) {
            var rows: [Claimed] = []
            var last = mark
            let lanes: [DeliveryLane] = onlyPersonal || personalOnly.contains(hub) ? [.personal] : [.personal, .bulk]
            for lane in lanes where rows.count < count && lane.rawValue >= (mark?.lane.rawValue ?? 0) {
                let after = mark.flatMap { $0.lane == lane ? ($0.due, $0.sequence) : nil }
                var laneRows: [Claimed] = []
                var ranges = 0
                for platform in platforms where pendingByPlatform[platform]?.contains(hub) == true {
                    let found = try await session.query(
                        Self.due(platform, hub: hub, lane: lane, at: at, limit: count - rows.count, after: after))
                    if !found.isEmpty { ranges += 1 }
                    laneRows += try found.map(Self.claimed)
                }
                if ranges > 1 { laneRows.sort { ($0.due, $0.sequence) < ($1.due, $1.sequence) } }
                let taken = laneRows.prefix(count - rows.count)
                if let final = taken.last { last = (lane, final.due, final.sequence) }
                rows += taken
            }
            return (rows, last)
        }
        var claimed: [Claimed] = []
        let weights = claimWeights.withLock { $0 }
        let shares = FairClaims.shares(of: served, limit: limit, weights: weights)
        var more: [(hub: String, mark: Mark?, room: Int)] = []
        var drained: [String] = []
        for (hub, share) in zip(served, shares) where claimed.count < limit {
            let room = room[hub] ?? Int.max
            let count = min(share, limit - claimed.count, room)
            let found = try await rows(of: hub, count: count, after: nil)
            if found.rows.count == count, count < room { more.append((hub, found.mark, room - count)) }
            // A hub read in full that had nothing due may have none pending any more.
            if found.rows.isEmpty, !onlyPersonal, !personalOnly.contains(hub) { drained.append(hub) }
            claimed += found.rows
        }
        if reused, !drained.isEmpty { try await forgetDone(drained, of: platforms, pendingByPlatform, session) }
        // What the others left goes to the hubs that had more, by weight again, from where their
        // share stopped (what a hub cannot use of that waits for the next claim).
        if claimed.count < limit, !more.isEmpty {
            let extra = FairClaims.shares(of: more.map(\.hub), limit: limit - claimed.count, weights: weights)
            for ((hub, mark, room), share) in zip(more, extra) where claimed.count < limit {
                claimed += try await rows(of: hub, count: min(room, share, limit - claimed.count), after: mark).rows
            }
        }
        guard !claimed.isEmpty else { return .empty }
        let leaseIDs = Set(claimed.lazy.filter { $0.leaseID != 0 }.map(\.leaseID))
        if !leaseIDs.isEmpty {
            // Past their first lease end: still held where their batch's lease was renewed. Those
            // are moved on to its end (locked here, so no claim takes them meanwhile).
            let live = Set(
                try await session.query(
                    "SELECT id FROM delivery_lease WHERE id \(anyOf: Array(leaseIDs)) AND expires_at > \(at)"
                ).map { try $0[0] as Int64 })
            let held = claimed.filter { live.contains($0.leaseID) }
            if !held.isEmpty {
                try await session.execute(
                    """
                    UPDATE delivery SET next_attempt_at = l.expires_at FROM delivery_lease l
                    WHERE delivery.sequence \(anyOf: held.map(\.sequence)) AND l.id = delivery.lease_id
                    """)
                claimed.removeAll { live.contains($0.leaseID) }
                guard !claimed.isEmpty else { return .empty }
            }
        }
        let ids = Array(Set(claimed.map(\.notificationID))).sorted()
        var hubs: [String: String] = [:]
        var enqueued: [String] = []
        for row in try await session.query("SELECT id, hub, state FROM notification WHERE id \(anyOf: ids)") {
            let id: String = try row[0]
            hubs[id] = try row[1]
            if try row[2] as Int32 == OutcomeState.enqueued.rawValue { enqueued.append(id) }
        }
        if !enqueued.isEmpty {
            // Only the first claim of a send changes its row (the others read it processing).
            try await session.execute(
                """
                UPDATE notification SET state = \(OutcomeState.processing.rawValue), updated_at = \(at), started_at = \(at)
                WHERE id \(anyOf: enqueued) AND state = \(OutcomeState.enqueued.rawValue)
                """)
        }
        let payloads = try await Self.payloads(of: ids, session)
        let takenOver = claimed.filter { !$0.leasedBy.isEmpty }
        try await Self.countRetries(takenOver.map { ($0.notificationID, $0.platform) }, session)
        var leaseID: Int64 = 0
        var leaseEnds: Int64 = 0
        if leasing {
            // The lease's clock starts now, after the reads and the waits above.
            leaseEnds = now() + lease.wholeMilliseconds
            leaseID =
                try await session.executeReturning(
                    "INSERT INTO delivery_lease (holder, expires_at) VALUES (\(replica), \(leaseEnds)) RETURNING id"
                ).first?[0] ?? 0
            // One statement for the whole batch: a statement per row cost as much as the row's own update.
            try await session.execute(
                """
                UPDATE delivery SET leased_by = \(replica), lease_id = \(leaseID), attempts = attempts + 1,
                                    updated_at = \(at), next_attempt_at = \(leaseEnds)
                WHERE sequence \(anyOf: claimed.map(\.sequence))
                """)
        }
        var items: [PushItem] = []
        items.reserveCapacity(claimed.count)
        for row in claimed {
            // Send stores a payload for every platform it targets, in the same transaction.
            guard
                let payload = payloads[row.notificationID]?[
                    OutboxPayload.Key(platform: row.platform, variant: row.variant)]
            else { continue }
            items.append(
                PushItem(
                    sequence: row.sequence, notificationID: row.notificationID, registrationID: row.registrationID,
                    platform: row.platform, handle: row.handle, messageID: row.messageID, attempt: row.attempts + 1,
                    giveUpAt: row.giveUpAt, payload: payload, hub: hubs[row.notificationID] ?? Names.defaultHub))
        }
        return ClaimedBatch(items: items, lease: leaseID, leaseEnds: leaseEnds, takenOver: takenOver.count)
    }

    /// The payloads of sends `ids`, by send and then by platform and variant.
    static func payloads(of ids: [String], _ session: any SQLSession) async throws
        -> [String: [OutboxPayload.Key: OutboxPayload]]
    {
        var payloads: [String: [OutboxPayload.Key: OutboxPayload]] = [:]
        for row in try await session.query(
            """
            SELECT notification_id, platform, variant, body, push_type, priority, content_type, expires_at_ms, collapse_id
            FROM outbox_payload WHERE notification_id \(anyOf: ids)
            """)
        {
            let payload = OutboxPayload(
                platform: Platform(rawValue: try row[1]),
                options: DeliveryOptions(
                    pushType: try row[4], priority: try row[5], contentType: try row[6], expiresAtUnixMs: try row[7],
                    collapseID: try row[8]),
                body: try row[3], variant: try row[2])
            payloads[try row[0] as String, default: [:]][payload.key] = payload
        }
        return payloads
    }

    /// `state = \(pendingState)`: written in the text, not bound, where a statement must use
    /// `delivery_due`: SQLite's planner takes a partial index only for a condition it can read.
    static let pendingState = SQLQuery(raw: String(DeliveryState.pending.rawValue))

    /// Adds taken-over leases to their send's `retries` counters, in one order for everyone.
    static func countRetries(_ rows: [(String, Platform)], _ session: any SQLSession) async throws {
        var counts: [String: [Int32: Int64]] = [:]
        for (id, platform) in rows { counts[id, default: [:]][platform.rawValue, default: 0] += 1 }
        for (id, platforms) in counts.sorted(by: { $0.key < $1.key }) {
            for (platform, count) in platforms.sorted(by: { $0.key < $1.key }) {
                try await session.execute(
                    """
                    UPDATE notification_platform SET retries = retries + \(count)
                    WHERE notification_id = \(id) AND platform = \(platform)
                    """)
            }
        }
    }
}
