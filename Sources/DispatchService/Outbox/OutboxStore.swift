public import HeraldModel
public import HeraldProto

/// Dispatch's durable outbox, whichever database holds it: ``Outbox`` (SQLite, one process) or
/// ``PostgresOutbox`` (PostgreSQL, shared by replicas of herald-dispatch).
///
/// Both keep the same promises: an acknowledged send is committed whole before Send answers; a
/// claimed delivery keeps its message id on every attempt; each delivery is recorded once, and a
/// send's counters add up to its audience. They differ in how a claim that was never recorded
/// (its process died) comes back: SQLite makes its leases due again when the one process restarts
/// (``recoverLeases()``); PostgreSQL leases expire, so any replica takes them over.
///
/// The value types (``Outbox/Target``, ``Outbox/Decision``, ``Outbox/StagedAudience``) are shared
/// and live on ``Outbox``.
public protocol OutboxStore: Sendable {
    /// Commits a send, all or nothing; nil when `scheduled` and the scheduled send is gone
    /// (cancelled, or made already, by this process or another).
    func enqueue(
        id: String, sender: String, targetUser: String, targetTag: String, payloads: [OutboxPayload], targets: [Outbox.Target],
        staged: Outbox.StagedAudience?, retryWindow: Duration, hub: String, scheduled: Bool
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

    func schedule(
        id: String, sender: String, targetUser: String, targetTag: String, hub: String, fireAt: Int64, request: [UInt8]
    ) async throws -> Int64
    /// Scheduled sends due now, earliest first (on PostgreSQL, each taken by one replica at a time).
    func dueScheduled(limit: Int) async throws -> [(id: String, fireAt: Int64, request: [UInt8])]
    func cancelScheduled(_ id: String, hub: String) async throws -> Outcome
    func abandonScheduled(_ id: String) async throws

    /// Deletes finished sends last changed before `before` (Unix ms); returns how many.
    @discardableResult
    func purge(before: Int64) async throws -> Int
    /// ResetForTests: every send, delivery, counter and queued removal.
    func deleteEverything() async throws -> Int64
    func pendingRemovals(limit: Int) async throws -> [(id: Int64, platform: Platform, handle: String, since: Int64)]
    func removalDone(_ id: Int64) async throws
    /// When the earliest pending delivery is due (Unix ms), if any.
    func nextDue() async throws -> Int64?
    func depth() async throws -> (pending: Int, removals: Int)
}
