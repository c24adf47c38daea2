public import HeraldModel
public import HeraldProto
public import HeraldService

/// Dispatch's durable outbox, whichever database holds it: ``Outbox`` (SQLite, one process) or
/// ``PostgresOutbox`` (PostgreSQL, shared by replicas of herald-dispatch).
///
/// Both keep the same promises: an acknowledged send is committed whole before Send answers; a
/// claimed delivery keeps its message id on every attempt; each delivery is recorded once, and a
/// send's counters add up to its audience. They differ in how a claim that was never recorded
/// (its process died) comes back: SQLite makes its leases due again when the one process restarts
/// (``recoverLeases()``); PostgreSQL leases expire, so any replica takes them over.
///
/// What both do the same way is written once, over ``sql`` (``OutboxStore``'s extension in
/// OutboxQueries.swift: reads, exports, purges); each class keeps its transactions.
///
/// The value types (``Outbox/Target``, ``Outbox/Decision``, ``Outbox/StagedAudience``) are shared
/// and live on ``Outbox``.
public protocol OutboxStore: Sendable {
    /// The database, for what is written once for both.
    var sql: any SQLDatabase { get }
    /// Unix epoch milliseconds; injected by tests.
    var now: @Sendable () -> Int64 { get }

    /// Commits a send, all or nothing; nil when `scheduled` and the scheduled send is gone
    /// (cancelled, or made already, by this process or another).
    /// `originalBody`: the caller's request body, kept for telemetry (a scheduled send keeps the
    /// one given to ``schedule(id:sender:targetUser:targetTag:hub:fireAt:request:originalBody:maxPending:)``).
    func enqueue(
        id: String, sender: String, targetUser: String, targetTag: String, payloads: [OutboxPayload],
        targets: [Outbox.Target],
        staged: Outbox.StagedAudience?, retryWindow: Duration, hub: String, scheduled: Bool, originalBody: [UInt8]
    ) async throws -> (state: OutcomeState, created: Int64)?
    /// Appends part of a large audience to the staging table, invisible to workers until the commit.
    func stage(_ targets: [Outbox.Target], to staged: inout Outbox.StagedAudience) async throws
    /// Deletes the staged rows of a send that failed before its commit (best effort).
    func discardStaged(_ staged: Outbox.StagedAudience) async
    /// Deletes staged rows no send will commit any more; called once at start-up.
    func deleteAbandonedStaging() async throws -> Int

    /// Makes the claims a previous run of this process never recorded due again; called once at
    /// start-up, before any worker runs.
    func recoverLeases() async throws -> Int
    /// Claims up to `limit` due deliveries of `platforms`, counting their attempt and leasing them.
    func claim(limit: Int, platforms: [Platform]) async throws -> [PushItem]
    /// How often the worker must extend the leases of the deliveries it has in flight; nil when
    /// leases do not expire (SQLite: one process, its leases end only with it).
    var leaseRenewalInterval: Duration? { get }
    /// Extends this process's leases on deliveries still in flight (each with the attempt its
    /// claim counted): a lease says its holder is alive, not that a batch is quick, so a live
    /// replica whose batch outlasts a lease (a loaded machine, a slow push service) keeps it.
    /// Returns how many were extended.
    func renewLeases(_ held: [(sequence: Int64, attempt: Int)]) async throws -> Int
    /// Claims, records in `inbox` and records as delivered up to `limit` due deliveries, in one
    /// transaction (exactly once).
    func deliverLocally(
        limit: Int, platforms: [Platform], inbox: InboxProvider
    ) async throws -> (delivered: [Platform: Int], finished: [(id: String, state: OutcomeState)])
    /// Records a batch's results; returns the notifications this finished.
    @discardableResult
    func record(_ decisions: [Outbox.Decision]) async throws -> [(id: String, state: OutcomeState)]

    func outcome(of id: String, requester: String, hub: String) async throws -> Outcome
    func deliveries(
        of id: String, requester: String, hub: String, failedOnly: Bool, after: Int64, limit: Int
    ) async throws -> [DeliveryRecord]

    /// Refuses with RESOURCE_EXHAUSTED when `hub` already has `maxPending` sends waiting.
    func schedule(
        id: String, sender: String, targetUser: String, targetTag: String, hub: String, fireAt: Int64, request: [UInt8],
        originalBody: [UInt8], maxPending: Int
    ) async throws -> Int64
    /// Scheduled sends due now, earliest first (on PostgreSQL, each taken by one replica at a time).
    func dueScheduled(limit: Int) async throws -> [(id: String, fireAt: Int64, request: [UInt8])]
    func cancelScheduled(_ id: String, hub: String) async throws -> Outcome
    /// Cancels every scheduled send of `hub` not made yet; returns how many.
    func cancelScheduled(hub: String) async throws -> Int64
    func abandonScheduled(_ id: String) async throws

    /// Deletes finished sends last changed before `before` (Unix ms); returns how many.
    @discardableResult
    func purge(before: Int64) async throws -> Int
    /// Deletes every finished send of `hub` (a deleted hub's); returns how many.
    @discardableResult
    func purge(hub: String) async throws -> Int
    /// ResetForTests: every send, delivery, counter and queued removal.
    func deleteEverything() async throws -> Int64
    /// Erase, sends: see ``ErasedRows`` and EraseUser in dispatch.proto.
    func eraseUser(_ user: String, hub: String) async throws -> ErasedRows
    /// Erase, devices: see EraseDevices in dispatch.proto; ``ErasedRows/inFlight`` counts the
    /// deliveries still waiting for their result.
    func eraseDevices(_ devices: [UserDevice]) async throws -> ErasedRows
    /// Export: the sends `user` made or that were addressed to them, by id after `after`.
    func exportSends(user: String, hub: String, after: String, limit: Int) async throws -> [SendRecord]
    /// Export: the delivery records to the registrations `ids`, by sequence after `after`.
    func exportDeliveries(to ids: [String], after: Int64, limit: Int) async throws -> [DeviceDelivery]
    /// Export: the inbox entries of the registrations `ids`, by sequence after `after`.
    func exportInbox(of ids: [String], after: Int64, limit: Int) async throws -> [InboxEntry]
    func pendingRemovals(limit: Int) async throws -> [(id: Int64, platform: Platform, handle: String, since: Int64)]
    func removalDone(_ id: Int64) async throws
    /// When the earliest pending delivery is due (Unix ms), if any.
    func nextDue() async throws -> Int64?
    func depth() async throws -> OutboxDepth
    /// The stored traceparent of each of the sends `ids` that was traced (only read when tracing is on).
    func traceParents(of ids: [String]) async throws -> [String: String]

    /// ListSends: ids of `hub`'s sends made before `before` (created_at, id), newest first.
    func recentSends(hub: String, before: (createdAt: Int64, id: String), limit: Int) async throws -> [String]
    /// SendStats: per minute since `since` (Unix ms), the sends made, their deliveries and failures by reason.
    func sendStats(hub: String, since: Int64) async throws -> [SendStatsMinute]
    /// The per-platform counters of `hub`'s sends made since `since`, newest first (at most
    /// `limit` rows), and the failure reasons of those sends, newest first: what the credentials
    /// status reads its last error from.
    func recentPlatformResults(hub: String, since: Int64, limit: Int) async throws -> OutboxPlatformResults
}

/// The queues' depth, sampled each second for the metrics.
public struct OutboxDepth: Sendable {
    /// Deliveries waiting for an attempt (or a retry).
    public var pending: Int
    /// Dead handles not yet removed from herald-registration.
    public var removals: Int
    /// When the oldest send still enqueued or processing was made (Unix ms); nil when none is.
    public var oldestOpenSend: Int64?
}

/// Rows of ``OutboxStore/recentPlatformResults(hub:since:limit:)``, newest first.
public struct OutboxPlatformResults: Sendable {
    public var counts: [(platform: Platform, createdAt: Int64, success: Int64, failure: Int64, pending: Int64)] = []
    public var failures: [(platform: Platform, createdAt: Int64, reason: String)] = []

    /// Per platform: the newest failure reason and when its send was made, and whether the newest
    /// finished send on that platform failed on every device.
    public func health() -> [Platform: (lastError: String, at: Int64, failing: Bool)] {
        var answer: [Platform: (lastError: String, at: Int64, failing: Bool)] = [:]
        for failure in failures where answer[failure.platform] == nil {
            answer[failure.platform] = (failure.reason, failure.createdAt, false)
        }
        var seen: Set<Platform> = []
        for count in counts where count.pending == 0 && !seen.contains(count.platform) {
            seen.insert(count.platform)
            if count.success == 0, count.failure > 0 { answer[count.platform]?.failing = true }
        }
        return answer
    }
}
