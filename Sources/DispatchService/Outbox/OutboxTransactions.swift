import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldTelemetry
public import PushProviders

/// The outbox's transactions, written once for both databases over ``Outbox/sql``: sends,
/// their staged audiences, claims and leases, results, and erasing devices.
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
    private func mine(_ column: String) -> SQLQuery {
        sharedByReplicas ? "\(raw: column) = \(replica)" : "\(raw: column) <> ''"
    }

    // MARK: sends

    /// Commits a send: the notification (ENQUEUED, or NO_TARGET_FOUND without targets), its
    /// payloads, and one pending delivery per target, all or nothing.
    ///
    /// With `scheduled`, the notification was stored by ``schedule(id:sender:targetUser:targetTag:hub:fireAt:request:originalBody:maxPending:)``
    /// and is made now: its scheduled row is deleted in the same transaction, and when there is
    /// none (cancelled, or already made, by this process or another) nothing is written and nil
    /// is returned. So a scheduled send is made once, whatever crashes in between.
    ///
    /// With `staged`, the audience's first targets were staged (``stage(_:to:)``) and `targets` are
    /// the rest: the staged rows become deliveries in the same transaction, before `targets`.
    @discardableResult
    public func enqueue(
        _ send: Send, targets: [Outbox.Target], staged: Outbox.StagedAudience? = nil, scheduled: Bool = false
    ) async throws -> (state: OutcomeState, created: Int64)? {
        let (id, sender, targetUser, targetTag) = (send.id, send.sender, send.targetUser, send.targetTag)
        let (payloads, retryWindow, hub, lane) = (send.payloads, send.retryWindow, send.hub, send.lane)
        let originalBody = send.originalBody
        let at = now()
        let giveUp = at + retryWindow.wholeMilliseconds
        let stagedCount = staged?.count ?? 0
        let none = targets.isEmpty && stagedCount == 0
        let state: OutcomeState = none ? .noTargetFound : .enqueued
        let finishedAt: Int64 = none ? at : 0
        let traceParent = Self.currentTraceParent
        let pending = DeliveryState.pending.rawValue
        let made: (created: Int64, platforms: [Platform])? = try await sql.transaction { session in
            var created = at
            if scheduled {
                guard try await session.execute("DELETE FROM scheduled_send WHERE notification_id = \(id)") == 1 else {
                    return nil
                }
                created =
                    try await session.executeReturning(
                        """
                        UPDATE notification SET state = \(state.rawValue), updated_at = \(at), finished_at = \(finishedAt)
                        WHERE id = \(id) RETURNING created_at
                        """
                    ).first?[0] ?? at
            } else {
                try await session.execute(
                    """
                    INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at, hub,
                                              finished_at, original_body, trace_parent)
                    VALUES (\(id), \(sender), \(targetUser), \(targetTag), \(state.rawValue), \(at), \(at), \(hub),
                            \(finishedAt), \(originalBody), \(traceParent))
                    """)
            }
            guard !none else { return (created, []) }
            try await Self.countPushes(stagedCount + targets.count, hub: hub, at: at, session)
            for payload in payloads {
                try await session.execute(
                    """
                    INSERT INTO outbox_payload (notification_id, platform, variant, body, collapse_id, push_type, priority,
                                                content_type, expires_at_ms)
                    VALUES (\(id), \(payload.platform.rawValue), \(payload.variant), \(payload.body),
                            \(payload.options.collapseID), \(payload.options.pushType), \(payload.options.priority),
                            \(payload.options.contentType), \(payload.options.expiresAtUnixMs))
                    """)
            }
            var perPlatform: [Platform: Int] = staged?.perPlatform ?? [:]
            if let staged, stagedCount > 0 {
                try await session.execute(
                    """
                    INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                          next_attempt_at, give_up_at, updated_at, variant, hub, lane)
                    SELECT \(id), registration_id, platform, handle, message_id, \(pending), \(at), \(giveUp), \(at), variant,
                           \(hub), \(lane.rawValue)
                    FROM audience_staging WHERE staging_key = \(staged.key) ORDER BY position
                    """)
                try await session.execute("DELETE FROM audience_staging WHERE staging_key = \(staged.key)")
            }
            let rows = Self.rows(of: targets, from: stagedCount, messageIDs: staged?.messageIDs ?? MessageIDs())
            try await session.execute(
                """
                INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                      next_attempt_at, give_up_at, updated_at, variant, hub, lane)
                SELECT \(id), u.registration_id, u.platform, u.handle, u.message_id, \(pending), \(at), \(giveUp), \(at),
                       u.variant, \(hub), \(lane.rawValue)
                FROM \(rows: rows) \(SQLRowSource.inOrder)
                """)
            for target in targets { perPlatform[target.platform, default: 0] += 1 }
            for (platform, count) in perPlatform.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                try await session.execute(
                    """
                    INSERT INTO notification_platform (notification_id, platform, success, failure, pending)
                    VALUES (\(id), \(platform.rawValue), 0, 0, \(count))
                    """)
            }
            if let notice = self.sendCommittedNotice(hub: hub, platforms: Array(perPlatform.keys)) {
                try await session.execute(notice)
            }
            return (created, Array(perPlatform.keys))
        }
        // After the commit: a claim between the two would find the hub without rows and drop it.
        if let made, !made.platforms.isEmpty { noteSend(hub: hub, platforms: made.platforms) }
        return made.map { (state, $0.created) }
    }

    /// `targets` as rows, numbered from `start` in the send's audience (`position`), each with the
    /// message id of its position.
    static func rows(of targets: [Outbox.Target], from start: Int, messageIDs: MessageIDs) -> SQLRowSource {
        SQLRowSource(count: targets.count)
            .integers("position", targets.indices.map { Int64(start + $0) })
            .texts("registration_id", targets.map(\.registrationID))
            .integers("platform", targets.map { Int64($0.platform.rawValue) })
            .texts("handle", targets.map(\.handle))
            .texts("message_id", targets.indices.map { messageIDs.id(start + $0) })
            .integers("variant", targets.map { Int64($0.variant) })
    }

    /// Appends `targets` to `staged`'s rows, in one transaction.
    public func stage(_ targets: [Outbox.Target], to staged: inout Outbox.StagedAudience) async throws {
        guard !targets.isEmpty else { return }
        let rows = Self.rows(of: targets, from: staged.count, messageIDs: staged.messageIDs)
        try await sql.execute(
            """
            INSERT INTO audience_staging (staging_key, position, registration_id, platform, handle, message_id, staged_at,
                                          variant)
            SELECT \(staged.key), u.position, u.registration_id, u.platform, u.handle, u.message_id, \(now()), u.variant
            FROM \(rows: rows)
            """)
        staged.record(targets)
    }

    /// Deletes a send's staged rows (it failed before its commit). Best effort: rows it leaves are
    /// deleted at a later start.
    public func discardStaged(_ staged: Outbox.StagedAudience) async {
        _ = try? await sql.execute("DELETE FROM audience_staging WHERE staging_key = \(staged.key)")
    }

    /// Deletes staged rows no send will commit any more (their process stopped mid-send); called
    /// once at start-up. On PostgreSQL, only rows staged over ``Outbox/stagingAge`` ago: the
    /// others may belong to a peer's send in progress.
    @discardableResult
    public func deleteAbandonedStaging() async throws -> Int {
        let before = sharedByReplicas ? now() - Outbox.stagingAge : Int64.max
        return try await sql.execute("DELETE FROM audience_staging WHERE staged_at < \(before)")
    }

    // MARK: scheduled sends

    /// Due scheduled sends not taken by another process, earliest first, each now taken by this
    /// one for ``Outbox/scheduledTake`` ms: a send whose making failed for a moment (a peer
    /// down) is due again after that, and a tick never gets the same sends back at once.
    public func dueScheduled(limit: Int) async throws -> [(id: String, fireAt: Int64, request: [UInt8])] {
        let at = now()
        // Asked four times a second, and nearly always nothing is due: a read first (on SQLite, a
        // reader connection), so a tick takes no write lock from the sends and results.
        let due = try await sql.queryFirst(
            "SELECT 1 FROM scheduled_send WHERE fire_at <= \(at) AND taken_until <= \(at) LIMIT 1")
        guard due != nil else { return [] }
        return try await sql.transactionRetryingConflicts { session in
            try await session.executeReturning(
                """
                UPDATE scheduled_send SET taken_until = \(at + Outbox.scheduledTake), taken_by = \(self.replica)
                WHERE notification_id IN (
                    SELECT notification_id FROM scheduled_send WHERE fire_at <= \(at) AND taken_until <= \(at)
                    ORDER BY fire_at LIMIT \(limit) \(SQLFragment.skipLocked))
                RETURNING notification_id, fire_at, request
                """
            ).map { (id: try $0[0] as String, fireAt: try $0[1] as Int64, request: try $0[2] as [UInt8]) }
                .sorted { $0.fireAt < $1.fireAt }
        }
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
