import Foundation
public import HeraldModel
public import HeraldProto
public import HeraldService
import Logging
import NIOCore
import PostgresNIO

/// Dispatch's outbox in PostgreSQL, shared by any number of herald-dispatch replicas.
///
/// The tables and the promises are ``Outbox``'s (see ``OutboxStore``); what differs is how
/// replicas share the work:
/// - **Claims** take due rows with `FOR UPDATE SKIP LOCKED`, so two replicas never take the same
///   row at once and never wait for each other.
/// - **Leases expire.** A claim moves the row's `next_attempt_at` to the end of its lease and
///   names the replica in `leased_by`: a row whose replica died or stalled is due again when the
///   lease runs out, to whichever replica claims next, with the same message id and its attempt
///   counted again (so it shows as retried). A replica that restarts takes back its own leases at
///   once (``recoverLeases()``), as on SQLite.
/// - **A result counts once.** Recording a claim's result updates the row only while it is still
///   pending at the attempt that claim counted: the results of a replica whose lease expired and
///   was taken over are dropped (its push may then arrive twice, with the same message id, and the
///   row shows two attempts), so counters always add up to the audience.
/// - **A send finishes once.** Recording locks the send's notification row first (in id order),
///   so replicas finishing the last deliveries of one send take turns, and exactly one sees
///   nothing pending.
/// - **Scheduled sends** are taken by one replica at a time (`taken_until`, `taken_by`); the
///   commit deletes the scheduled row in its own transaction, so a send is made once however
///   replicas race. A replica that restarts takes back its own takes at once, as its leases
///   (without it, a send it had taken when it died fired ``scheduledTake`` late).
public final class PostgresOutbox: OutboxStore {
    let db: HeraldPostgres
    public let now: @Sendable () -> Int64
    /// This replica's name in `leased_by`: stable across its restarts, distinct from its peers'.
    public let replica: String
    /// How long a claim holds its rows before any replica may take them over.
    public let lease: Duration
    public var sql: any SQLDatabase { db.sql }

    public init(
        db: HeraldPostgres, replica: String, lease: Duration = .seconds(90),
        now: @escaping @Sendable () -> Int64 = unixMillis
    )
        async throws
    {
        precondition(!replica.isEmpty, "a replica needs a name")
        self.db = db
        self.replica = replica
        self.lease = lease
        self.now = now
        try await db.migrate(Self.migrations)
    }

    /// The schema's history (the outbox, the inbox and hubs' credentials: dispatch's whole
    /// database); names are never changed once released.
    public static let migrations: [PostgresMigration] = [
        .heartbeat,
        PostgresMigration(
            "dispatch-v1",
            [
                """
                CREATE TABLE notification (
                    id TEXT COLLATE "C" PRIMARY KEY,
                    sender TEXT NOT NULL,
                    target_user TEXT NOT NULL,
                    target_tag TEXT NOT NULL,
                    state INTEGER NOT NULL,
                    created_at BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL,
                    hub TEXT NOT NULL,
                    started_at BIGINT NOT NULL DEFAULT 0,
                    finished_at BIGINT NOT NULL DEFAULT 0
                )
                """,
                "CREATE INDEX notification_updated ON notification (updated_at)",
                """
                CREATE TABLE notification_platform (
                    notification_id TEXT COLLATE "C" NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    success BIGINT NOT NULL DEFAULT 0,
                    failure BIGINT NOT NULL DEFAULT 0,
                    pending BIGINT NOT NULL DEFAULT 0,
                    removed BIGINT NOT NULL DEFAULT 0,
                    retries BIGINT NOT NULL DEFAULT 0,
                    PRIMARY KEY (notification_id, platform)
                )
                """,
                """
                CREATE TABLE notification_failure (
                    notification_id TEXT COLLATE "C" NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    reason TEXT NOT NULL,
                    count BIGINT NOT NULL,
                    PRIMARY KEY (notification_id, platform, reason)
                )
                """,
                """
                CREATE TABLE outbox_payload (
                    notification_id TEXT COLLATE "C" NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    variant INTEGER NOT NULL,
                    body BYTEA NOT NULL,
                    collapse_id TEXT NOT NULL,
                    push_type TEXT NOT NULL,
                    priority INTEGER NOT NULL,
                    content_type TEXT NOT NULL,
                    expires_at_ms BIGINT NOT NULL,
                    PRIMARY KEY (notification_id, platform, variant)
                )
                """,
                """
                CREATE TABLE delivery (
                    sequence BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    notification_id TEXT COLLATE "C" NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    message_id TEXT NOT NULL,
                    state INTEGER NOT NULL,
                    leased_by TEXT NOT NULL DEFAULT '',
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at BIGINT NOT NULL,
                    give_up_at BIGINT NOT NULL,
                    last_status INTEGER NOT NULL DEFAULT 0,
                    reason TEXT NOT NULL DEFAULT '',
                    handle_removed BOOLEAN NOT NULL DEFAULT false,
                    updated_at BIGINT NOT NULL,
                    variant INTEGER NOT NULL DEFAULT 0
                )
                """,
                // 1 is DeliveryState.pending. A leased row is pending too, due when its lease ends.
                "CREATE INDEX delivery_due ON delivery (next_attempt_at, sequence) WHERE state = 1",
                "CREATE INDEX delivery_notification ON delivery (notification_id, sequence)",
                """
                CREATE TABLE handle_removal (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    invalid_since BIGINT NOT NULL,
                    created_at BIGINT NOT NULL
                )
                """,
                """
                CREATE TABLE scheduled_send (
                    notification_id TEXT COLLATE "C" PRIMARY KEY REFERENCES notification(id) ON DELETE CASCADE,
                    fire_at BIGINT NOT NULL,
                    request BYTEA NOT NULL,
                    taken_until BIGINT NOT NULL DEFAULT 0
                )
                """,
                "CREATE INDEX scheduled_send_due ON scheduled_send (fire_at)",
                // Keyed by the staging attempt, not the send: two replicas racing to make one
                // scheduled send never mix or delete each other's rows.
                """
                CREATE TABLE audience_staging (
                    staging_key TEXT COLLATE "C" NOT NULL,
                    position INTEGER NOT NULL,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    message_id TEXT NOT NULL,
                    staged_at BIGINT NOT NULL,
                    PRIMARY KEY (staging_key, position)
                )
                """,
                """
                CREATE TABLE inbox (
                    sequence BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    notification_id TEXT NOT NULL,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    headers TEXT NOT NULL,
                    payload BYTEA NOT NULL,
                    recorded_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX inbox_handle ON inbox (handle, sequence)",
                "CREATE INDEX inbox_recorded ON inbox (recorded_at)",
                """
                CREATE TABLE hub_credential (
                    hub TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    settings TEXT NOT NULL,
                    updated_at BIGINT NOT NULL,
                    PRIMARY KEY (hub, platform)
                )
                """,
            ]),
        // The console's reads (issue 18): a hub's recent sends, newest first, and its minutes.
        PostgresMigration(
            "dispatch-v2-sends-by-hub", ["CREATE INDEX notification_hub_created ON notification (hub, created_at, id)"]),
        // The oldest send not finished, for herald_outbox_oldest_age_seconds (1 enqueued, 2 processing).
        PostgresMigration(
            "dispatch-v3-open-sends",
            ["CREATE INDEX notification_open ON notification (created_at) WHERE state IN (1, 2)"]),
        // The caller's request body, for NH telemetry's NotificationBody.
        PostgresMigration(
            "dispatch-v4-original-body",
            ["ALTER TABLE notification ADD COLUMN original_body BYTEA NOT NULL DEFAULT ''::bytea"]),
        // The traceparent of the span that made the send (Outbox's outbox-v11-trace-parent).
        PostgresMigration(
            "dispatch-v5-trace-parent", ["ALTER TABLE notification ADD COLUMN trace_parent TEXT NOT NULL DEFAULT ''"]),
        // The replica that took a due scheduled send, so its restart takes it back (recoverLeases).
        PostgresMigration(
            "dispatch-v6-scheduled-taken-by",
            ["ALTER TABLE scheduled_send ADD COLUMN taken_by TEXT NOT NULL DEFAULT ''"]),
        // A template send's audience spills too: each staged row keeps its payload variant
        // (Outbox's outbox-v12-staging-variant).
        PostgresMigration(
            "dispatch-v7-staging-variant",
            ["ALTER TABLE audience_staging ADD COLUMN variant INTEGER NOT NULL DEFAULT 0"]),
        // A claim names its platforms: each is one ordered range, however many rows other
        // platforms have due (Outbox's outbox-v13-due-by-platform).
        PostgresMigration(
            "dispatch-v8-due-by-platform",
            [
                "DROP INDEX delivery_due",
                "CREATE INDEX delivery_due ON delivery (platform, next_attempt_at, sequence) WHERE state = 1",
            ]),
    ]

    /// Rows one INSERT … unnest carries: large sends go in several statements of one transaction.
    static let insertChunk = 5000

    /// How long a replica's take of a due scheduled send keeps the others off it.
    static let scheduledTake: Int64 = 30_000

    /// Staged rows older than this belong to no send in progress (the replica staging them died).
    static let stagingAge: Int64 = 3_600_000

    // MARK: sends

    nonisolated(nonsending) public func enqueue(
        id: String, sender: String, targetUser: String, targetTag: String, payloads: [OutboxPayload],
        targets: [Outbox.Target],
        staged: Outbox.StagedAudience?, retryWindow: Duration, hub: String, scheduled: Bool, originalBody: [UInt8] = []
    ) async throws -> (state: OutcomeState, created: Int64)? {
        let at = now()
        let giveUp = at + retryWindow.wholeMilliseconds
        let stagedCount = staged?.count ?? 0
        let none = targets.isEmpty && stagedCount == 0
        let state: OutcomeState = none ? .noTargetFound : .enqueued
        let finishedAt: Int64 = none ? at : 0
        let traceParent = Outbox.currentTraceParent
        let logger = db.logger
        let created: Int64? = try await db.transaction { connection in
            var created = at
            if scheduled {
                let taken = try await connection.query(
                    "DELETE FROM scheduled_send WHERE notification_id = \(id) RETURNING 1", logger: logger
                ).collect()
                guard taken.count == 1 else { return nil }
                let rows = try await connection.query(
                    """
                    UPDATE notification SET state = \(state.rawValue), updated_at = \(at), finished_at = \(finishedAt)
                    WHERE id = \(id) RETURNING created_at
                    """, logger: logger
                ).collect()
                created = try rows.first?.decode(Int64.self) ?? at
            } else {
                try await connection.query(
                    """
                    INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at, hub, finished_at,
                                              original_body, trace_parent)
                    VALUES (\(id), \(sender), \(targetUser), \(targetTag), \(state.rawValue), \(at), \(at), \(hub), \(finishedAt),
                            \(ByteBuffer(bytes: originalBody)), \(traceParent))
                    """, logger: logger)
            }
            guard !none else { return created }
            for payload in payloads {
                try await connection.query(
                    """
                    INSERT INTO outbox_payload (notification_id, platform, variant, body, collapse_id, push_type, priority,
                                                content_type, expires_at_ms)
                    VALUES (\(id), \(payload.platform.rawValue), \(Int32(payload.variant)), \(ByteBuffer(bytes: payload.body)),
                            \(payload.options.collapseID), \(payload.options.pushType), \(payload.options.priority),
                            \(payload.options.contentType), \(payload.options.expiresAtUnixMs))
                    """, logger: logger)
            }
            var perPlatform: [Platform: Int] = staged?.perPlatform ?? [:]
            if let staged, stagedCount > 0 {
                try await connection.query(
                    """
                    INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                          next_attempt_at, give_up_at, updated_at, variant)
                    SELECT \(id), registration_id, platform, handle, message_id, \(DeliveryState.pending.rawValue), \(at),
                           \(giveUp), \(at), variant
                    FROM audience_staging WHERE staging_key = \(staged.key) ORDER BY position
                    """, logger: logger)
                try await connection.query(
                    "DELETE FROM audience_staging WHERE staging_key = \(staged.key)", logger: logger)
            }
            let ids = staged?.messageIDs ?? MessageIDs()
            var start = 0
            while start < targets.count {
                let chunk = targets[start..<min(start + Self.insertChunk, targets.count)]
                let messageIDs = chunk.indices.map { ids.id(stagedCount + $0) }
                try await connection.query(
                    """
                    INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                          next_attempt_at, give_up_at, updated_at, variant)
                    SELECT \(id), t.registration_id, t.platform, t.handle, t.message_id, \(DeliveryState.pending.rawValue),
                           \(at), \(giveUp), \(at), t.variant
                    FROM unnest(\(chunk.map(\.registrationID))::text[], \(chunk.map(\.platform.rawValue))::int[],
                                \(chunk.map(\.handle))::text[], \(messageIDs)::text[], \(chunk.map { Int32($0.variant) })::int[])
                         WITH ORDINALITY AS t(registration_id, platform, handle, message_id, variant, n)
                    ORDER BY t.n
                    """, logger: logger)
                for target in chunk { perPlatform[target.platform, default: 0] += 1 }
                start += Self.insertChunk
            }
            for (platform, count) in perPlatform {
                try await connection.query(
                    """
                    INSERT INTO notification_platform (notification_id, platform, pending)
                    VALUES (\(id), \(platform.rawValue), \(Int64(count)))
                    """, logger: logger)
            }
            // Delivered at the commit, to every replica listening (listenForSends).
            try await connection.query("SELECT pg_notify(\(self.sendsChannel), '')", logger: logger)
            return created
        }
        return created.map { (state, $0) }
    }

    /// The NOTIFY channel of committed sends: the schema's, so deployments sharing a database do
    /// not wake each other.
    var sendsChannel: String { "\(db.schema)_sends" }

    /// Calls `wake` whenever any replica commits a send, until the task is cancelled or the
    /// connection fails (it throws then; call it again). Holds one pooled connection for LISTEN.
    /// Without it, a replica that did not take the send finds its deliveries at its next poll.
    public func listenForSends(_ wake: @escaping @Sendable () -> Void) async throws {
        let channel = sendsChannel
        try await db.client.withConnection { connection in
            try await connection.listen(on: channel) { notifications in
                for try await _ in notifications { wake() }
            }
        }
    }

    nonisolated(nonsending) public func stage(_ targets: [Outbox.Target], to staged: inout Outbox.StagedAudience)
        async throws
    {
        guard !targets.isEmpty else { return }
        let start = staged.count
        let ids = staged.messageIDs
        let at = now()
        var offset = 0
        while offset < targets.count {
            let chunk = targets[offset..<min(offset + Self.insertChunk, targets.count)]
            let positions = chunk.indices.map { Int32(start + $0) }
            try await db.query(
                """
                INSERT INTO audience_staging (staging_key, position, registration_id, platform, handle, message_id, staged_at,
                                              variant)
                SELECT \(staged.key), t.position, t.registration_id, t.platform, t.handle, t.message_id, \(at), t.variant
                FROM unnest(\(positions)::int[], \(chunk.map(\.registrationID))::text[], \(chunk.map(\.platform.rawValue))::int[],
                            \(chunk.map(\.handle))::text[], \(positions.map { ids.id(Int($0)) })::text[],
                            \(chunk.map { Int32($0.variant) })::int[])
                     AS t(position, registration_id, platform, handle, message_id, variant)
                """)
            offset += Self.insertChunk
        }
        staged.record(targets)
    }

    nonisolated(nonsending) public func discardStaged(_ staged: Outbox.StagedAudience) async {
        _ = try? await db.query("DELETE FROM audience_staging WHERE staging_key = \(staged.key)")
    }

    /// Only rows staged over an hour ago: the others may belong to a peer's send in progress.
    nonisolated(nonsending) public func deleteAbandonedStaging() async throws -> Int {
        try await db.rows("DELETE FROM audience_staging WHERE staged_at < \(now() - Self.stagingAge) RETURNING 1").count
    }

    // MARK: scheduled sends

    /// Due scheduled sends not taken by another replica, each now taken by this one for
    /// ``scheduledTake`` ms (a transient failure makes it due again after that).
    nonisolated(nonsending) public func dueScheduled(limit: Int) async throws -> [(
        id: String, fireAt: Int64, request: [UInt8]
    )] {
        let at = now()
        let rows = try await db.rows(
            """
            UPDATE scheduled_send s SET taken_until = \(at + Self.scheduledTake), taken_by = \(replica)
            FROM (SELECT notification_id FROM scheduled_send WHERE fire_at <= \(at) AND taken_until <= \(at)
                  ORDER BY fire_at LIMIT \(Int64(limit)) FOR UPDATE SKIP LOCKED) due
            WHERE s.notification_id = due.notification_id
            RETURNING s.notification_id, s.fire_at, s.request
            """)
        return try rows.map { row in
            let (id, fireAt, request) = try row.decode((String, Int64, ByteBuffer).self)
            return (id, fireAt, Array(buffer: request))
        }.sorted { $0.fireAt < $1.fireAt }
    }

    // MARK: maintenance

    /// The least of each platform's first entry in `delivery_due` (one look-up each, never a scan).
    nonisolated(nonsending) public func nextDue() async throws -> Int64? {
        let platforms = Platform.delivered.map(\.rawValue)
        return try await db.rows(
            """
            SELECT MIN(first) FROM unnest(\(platforms)::integer[]) AS p(platform)
            CROSS JOIN LATERAL (
                SELECT MIN(next_attempt_at) AS first FROM delivery
                WHERE state = \(DeliveryState.pending.rawValue) AND platform = p.platform) AS due
            """
        )
        .first?
        .decode(Int64?.self)
    }

    nonisolated(nonsending) public func depth() async throws -> OutboxDepth {
        let row = try await db.rows(
            """
            SELECT (SELECT count(*) FROM delivery WHERE state = \(DeliveryState.pending.rawValue)),
                   (SELECT count(*) FROM handle_removal),
                   (SELECT min(created_at) FROM notification WHERE state IN (1, 2))
            """)
        guard let (pending, removals, oldest) = try row.first?.decode((Int64, Int64, Int64?).self) else {
            return OutboxDepth(pending: 0, removals: 0, oldestOpenSend: nil)
        }
        return OutboxDepth(pending: Int(pending), removals: Int(removals), oldestOpenSend: oldest)
    }
}
