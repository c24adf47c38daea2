import Foundation
import GRDB
import HeraldModel
public import HeraldProto
public import HeraldSQL
import Logging
import NIOPosix
public import PushProviders
import Synchronization

/// Dispatch's durable outbox: one row per (notification, registration), in SQLite (one process,
/// the embedded default) or PostgreSQL (shared by any number of herald-dispatch replicas). The same
/// code runs on both, over ``sql``: the transactions in OutboxTransactions.swift, the reads,
/// exports and purges in OutboxQueries.swift. What differs between the databases is behind the
/// SQL seam, in each schema's history, and in ``sharedByReplicas``.
///
/// The promises:
/// - **An acknowledged send is committed whole** (the notification, its payloads and every
///   delivery row, in one transaction) before Send answers, so it survives a crash.
/// - **Claims** count the attempt and take a lease in the same transaction; on PostgreSQL with
///   `FOR UPDATE SKIP LOCKED`, so two replicas never take the same row and never wait for each
///   other. A claimed delivery keeps its message id on every attempt.
/// - **Leases expire.** A claim holds its batch under one lease (a `delivery_lease` row), moves
///   each row's `next_attempt_at` to the lease's end and names its holder in `leased_by`: a row
///   whose holder died or stalled is due again when the lease runs out, to whoever claims next,
///   its attempt counted again (so it shows as retried). A live holder renews the lease of each
///   batch it has in flight (one row, on a connection and thread of its own on PostgreSQL); a
///   restart takes its own leases back at once (``recoverLeases()``).
/// - **A result counts once.** Recording a claim's result updates the row only while it is still
///   pending at the attempt that claim counted: the results of a holder whose lease was taken
///   over are dropped (its push may then arrive twice, with the same message id, and the row
///   shows two attempts), so counters always add up to the audience.
/// - **A send finishes once.** Recording locks the send's notification row first (in id order),
///   so replicas finishing the last deliveries of one send take turns, and exactly one sees
///   nothing pending.
/// - **Scheduled sends** are taken by one process at a time (`taken_until`, `taken_by`); the
///   commit deletes the scheduled row in its own transaction, so a send is made once however
///   replicas race or crash. A restart takes back its own takes at once, as its leases.
public final class Outbox: Sendable {
    public let sql: any SQLDatabase
    /// The SQLite file, for tests' reads; nil on PostgreSQL.
    let sqlite: SQLiteDatabase?
    /// The PostgreSQL schema, for LISTEN/NOTIFY between replicas; nil on SQLite.
    let postgres: HeraldPostgres?
    /// Unix epoch milliseconds; injected by tests.
    public let now: @Sendable () -> Int64
    /// This process's name in `leased_by`: stable across its restarts, distinct from its peers'.
    public let replica: String
    /// How long a claim holds its rows before anyone may take them over.
    public let lease: Duration
    /// Where leases are renewed: on PostgreSQL a connection of their own, so that a renewal never
    /// waits for the pool behind the deliveries it protects (results queued on a large send's
    /// row, claims, reads); on SQLite the file's one writer.
    let leaseSQL: any SQLDatabase
    /// The hub the last claim's fair share ended with (``FairClaims``): the next starts after it.
    let claimCursor = Mutex("")
    /// The hubs with pending rows each claim's platforms last had (``hubsWithPending(_:after:_:)``),
    /// kept up to date by the sends since (``HubDiscovery``).
    let discovered = Mutex<[[Platform]: HubDiscovery]>([:])
    /// How long the claims go without looking for hubs (``HubDiscovery/maxAge`` unless a test
    /// sets it, so that what it checks does not hang on how fast the machine is).
    let hubLookInterval = Mutex(HubDiscovery.maxAge)
    /// Hubs' claim weights that are set (``HubPushLimit/weight``): read back by the delivery
    /// worker every few seconds, and at once when set through this process.
    let claimWeights = Mutex<[String: Int]>([:])

    /// `db` is the one object every write to the file goes through (``SQLiteDatabase``): the inbox
    /// and hubs' credentials share it. One process owns the file.
    public init(
        db: SQLiteDatabase, replica: String = "local", lease: Duration = .seconds(90),
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) throws {
        guard !replica.isEmpty else { throw ConfigError("leases need a holder's name") }
        sql = db
        leaseSQL = db
        sqlite = db
        postgres = nil
        self.replica = replica
        self.lease = lease
        self.now = now
        try DispatchSchema.migrate(db)
    }

    /// The outbox in `postgres`'s schema, shared with the replicas named otherwise than `replica`.
    public init(
        postgres: HeraldPostgres, replica: String, lease: Duration = .seconds(90),
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) async throws {
        guard !replica.isEmpty else { throw ConfigError("a replica needs a name") }
        sql = postgres.sql
        leaseSQL = try HeraldPostgres(
            postgres.location, logger: Logger(label: "herald.dispatch.leases"), maximumConnections: 1,
            eventLoopGroup: Self.leaseLoop
        ).sql
        sqlite = nil
        self.postgres = postgres
        self.replica = replica
        self.lease = lease
        self.now = now
        try await postgres.sql.migrate(DispatchSchema.schema)
    }

    /// The thread lease renewals' connection runs on: the shared event loops also carry every
    /// push's HTTP/2 frames, and a renewal answered behind a busy loop came seconds late.
    static let leaseLoop = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// Whether other processes share the database (PostgreSQL's replicas): then a restart takes
    /// back only its own leases, and staged rows are abandoned only when old. A SQLite file has
    /// one process: every lease is its own.
    public var sharedByReplicas: Bool { postgres != nil }

    /// Run in a send's commit to wake the other replicas (``listenForSends(_:)``); nil without them.
    /// The NOTIFY of a send committed with rows of `hub` on `platforms` (``HubDiscovery/notice(hub:platforms:)``).
    func sendCommittedNotice(hub: String, platforms: [Platform]) -> SQLQuery? {
        postgres.map { _ in "SELECT pg_notify(\(sendsChannel), \(HubDiscovery.notice(hub: hub, platforms: platforms)))"
        }
    }

    /// OutcomeState numbers for SQL (`state IN (…)`): a send that is still going, and one that is over.
    static let unfinishedStateValues = [OutcomeState.enqueued, .processing].map(\.rawValue)
    static let finishedStateValues = [OutcomeState.completed, .abandoned, .noTargetFound, .cancelled].map(\.rawValue)

    /// One send as ``enqueue(_:targets:staged:scheduled:)`` commits it: its id, who sent it and to
    /// whom (a user, a tag expression, or neither for a direct send), its payloads (one per
    /// platform, or per rendered template), its hub and lane, how long its deliveries are retried,
    /// and the request's body as it came (NH's telemetry reads it back).
    public struct Send: Sendable {
        public var id: String
        public var sender: String
        public var targetUser: String
        public var targetTag: String
        public var payloads: [OutboxPayload]
        public var retryWindow: Duration
        public var hub: String
        public var lane: DeliveryLane
        public var originalBody: [UInt8]

        public init(
            id: String, sender: String, targetUser: String = "", targetTag: String = "", payloads: [OutboxPayload],
            retryWindow: Duration, hub: String = Names.defaultHub, lane: DeliveryLane = .bulk,
            originalBody: [UInt8] = []
        ) {
            self.id = id
            self.sender = sender
            self.targetUser = targetUser
            self.targetTag = targetTag
            self.payloads = payloads
            self.retryWindow = retryWindow
            self.hub = hub
            self.lane = lane
            self.originalBody = originalBody
        }
    }

    /// One registration to deliver to, from the audience stream (or a handle of a direct send,
    /// with an empty registration id).
    public struct Target: Sendable {
        public var registrationID: String
        public var platform: Platform
        public var handle: String
        /// The payload variant it gets (template sends; 0 otherwise).
        public var variant: Int = 0

        /// For herald-bench's template loop, which makes a native send's targets.
        package init(registrationID: String, platform: Platform, handle: String, variant: Int = 0) {
            self.registrationID = registrationID
            self.platform = platform
            self.handle = handle
            self.variant = variant
        }
    }
}
