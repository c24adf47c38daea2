import Foundation
public import GRDB
public import HeraldProto
public import HeraldRPC

/// What one push carries, shared by every delivery of one platform of one send.
public struct OutboxPayload: Sendable, Hashable {
    public var platform: Platform
    /// Lower-case header names from ``PlatformRules``, in a stable order.
    public var headers: [Header]
    public var body: [UInt8]
    /// When the push service may stop trying, Unix epoch seconds; 0: its default.
    public var expiresAt: Int64
    /// APNs apns-collapse-id, FCM collapse_key, Web Push Topic; empty: none.
    public var collapseID: String

    public func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
}

/// One delivery a worker claimed: a payload for one registration, on its `attempt`-th try.
public struct PushItem: Sendable {
    public var sequence: Int64
    public var notificationID: String
    public var registrationID: String
    public var platform: Platform
    public var handle: String
    /// Fixed when the send was committed and reused by every attempt (APNs apns-id).
    public var messageID: String
    /// 1 for the first attempt.
    public var attempt: Int
    /// When the retry window ends, Unix ms.
    public var giveUpAt: Int64
    public var payload: OutboxPayload
}

/// What a push service said about one delivery.
public enum PushResult: Sendable, Equatable {
    /// Accepted.
    case delivered(status: Int)
    /// Try again later (429, 5xx, timeout, lost connection), not before `after` when the service said so.
    case retry(status: Int, reason: String, after: Duration?)
    /// Refused for good; never retried.
    case failed(status: Int, reason: String)
    /// The handle is dead: failed for good, and registration must delete it. `since`: when it
    /// stopped being valid (Unix ms, APNs' timestamp), 0 when unknown.
    case unregistered(status: Int, reason: String, since: Int64)
}

/// Dispatch's durable outbox in SQLite: one row per (notification, registration). Send commits the
/// notification, its payloads and every delivery row in one transaction before it answers, so an
/// acknowledged send survives a crash. Workers claim due rows (counting the attempt and taking a
/// lease in the same transaction), deliver, and record the result; after a restart, leased rows
/// are due again at once, their attempt count showing they were retried.
///
/// One herald-dispatch process owns a database (leases are not shared between processes).
public final class Outbox: Sendable {
    private let db: any DatabaseWriter
    /// Unix epoch milliseconds; injected by tests.
    private let now: @Sendable () -> Int64

    public init(db: any DatabaseWriter, now: @escaping @Sendable () -> Int64 = unixMillis) throws {
        self.db = db
        self.now = now
        try Self.migrator.migrate(db)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        Dispatcher.registerNotificationMigration(&migrator)
        migrator.registerMigration("outbox-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE outbox_payload (
                        notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                        platform INTEGER NOT NULL,
                        headers TEXT NOT NULL,
                        body BLOB NOT NULL,
                        expires_at INTEGER NOT NULL,
                        collapse_id TEXT NOT NULL,
                        PRIMARY KEY (notification_id, platform)
                    ) WITHOUT ROWID;
                    CREATE TABLE delivery (
                        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                        notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                        registration_id TEXT NOT NULL,
                        platform INTEGER NOT NULL,
                        handle TEXT NOT NULL,
                        message_id TEXT NOT NULL,
                        state INTEGER NOT NULL,
                        leased INTEGER NOT NULL DEFAULT 0,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        next_attempt_at INTEGER NOT NULL,
                        give_up_at INTEGER NOT NULL,
                        last_status INTEGER NOT NULL DEFAULT 0,
                        reason TEXT NOT NULL DEFAULT '',
                        handle_removed INTEGER NOT NULL DEFAULT 0,
                        updated_at INTEGER NOT NULL
                    );
                    CREATE INDEX delivery_due ON delivery(next_attempt_at) WHERE state = 1 AND leased = 0;
                    CREATE INDEX delivery_notification ON delivery(notification_id, state);
                    CREATE TABLE handle_removal (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        platform INTEGER NOT NULL,
                        handle TEXT NOT NULL,
                        invalid_since INTEGER NOT NULL,
                        created_at INTEGER NOT NULL
                    );
                    """)
        }
        return migrator
    }

    /// One registration to deliver to, from the audience stream.
    public struct Target: Sendable {
        public var registrationID: String
        public var platform: Platform
        public var handle: String
    }

    /// Commits a send: the notification (ENQUEUED, or NO_TARGET_FOUND without targets), its
    /// payloads, and one pending delivery per target, all or nothing.
    public func enqueue(
        id: String, sender: String, targetUser: String, targetTag: String, payloads: [OutboxPayload], targets: [Target],
        retryWindow: Duration
    ) async throws -> (state: OutcomeState, created: Int64) {
        let created = now()
        let giveUp = created + retryWindow.wholeMilliseconds
        let state: OutcomeState = targets.isEmpty ? .noTargetFound : .enqueued
        try await db.write { db in
            try db.execute(
                sql: """
                    INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [id, sender, targetUser, targetTag, state.rawValue, created, created])
            guard !targets.isEmpty else { return }
            for payload in payloads {
                try db.execute(
                    sql: """
                        INSERT INTO outbox_payload (notification_id, platform, headers, body, expires_at, collapse_id)
                        VALUES (?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        id, payload.platform.rawValue, Self.encode(payload.headers), Data(payload.body), payload.expiresAt,
                        payload.collapseID,
                    ])
            }
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                          next_attempt_at, give_up_at, updated_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """)
            for target in targets {
                try insert.execute(arguments: [
                    id, target.registrationID, target.platform.rawValue, target.handle, UUID().uuidString,
                    DeliveryState.pending.rawValue, created, giveUp, created,
                ])
            }
        }
        return (state, created)
    }

    /// Makes every delivery leased by a previous process due now (its attempt was counted, so it
    /// shows as retried). Call once at start-up, before any worker runs.
    @discardableResult
    public func recoverLeases() throws -> Int {
        try db.write { db in
            try db.execute(
                sql: "UPDATE delivery SET leased = 0, next_attempt_at = ? WHERE leased = 1 AND state = ?",
                arguments: [now(), DeliveryState.pending.rawValue])
            return db.changesCount
        }
    }

    /// Claims up to `limit` due deliveries: counts their attempt and leases them, in one transaction.
    public func claim(limit: Int) async throws -> [PushItem] {
        let at = now()
        return try await db.write { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT sequence, notification_id, registration_id, platform, handle, message_id, attempts, give_up_at
                        FROM delivery WHERE state = 1 AND leased = 0 AND next_attempt_at <= ?
                        ORDER BY next_attempt_at, sequence LIMIT ?
                        """),
                arguments: [at, limit])
            guard !rows.isEmpty else { return [] }
            let lease = try db.cachedStatement(
                sql: "UPDATE delivery SET leased = 1, attempts = attempts + 1, updated_at = ? WHERE sequence = ?")
            var payloads: [String: [Platform: OutboxPayload]] = [:]
            var items: [PushItem] = []
            items.reserveCapacity(rows.count)
            for row in rows {
                let notificationID: String = row["notification_id"]
                let platform = Platform(rawValue: row["platform"])
                if payloads[notificationID] == nil {
                    payloads[notificationID] = try Self.payloads(of: notificationID, db)
                    try db.execute(
                        sql: "UPDATE notification SET state = ?, updated_at = ? WHERE id = ? AND state = ?",
                        arguments: [OutcomeState.processing.rawValue, at, notificationID, OutcomeState.enqueued.rawValue])
                }
                guard let payload = payloads[notificationID]?[platform] else {
                    // Cannot happen (Send stores a payload for every platform it targets); never spin on it.
                    try db.execute(
                        sql: "UPDATE delivery SET state = ?, reason = 'NoPayload', updated_at = ? WHERE sequence = ?",
                        arguments: [DeliveryState.failed.rawValue, at, row["sequence"]])
                    continue
                }
                try lease.execute(arguments: [at, row["sequence"]])
                let attempts: Int = row["attempts"]
                items.append(PushItem(
                    sequence: row["sequence"], notificationID: notificationID, registrationID: row["registration_id"],
                    platform: platform, handle: row["handle"], messageID: row["message_id"], attempt: attempts + 1,
                    giveUpAt: row["give_up_at"], payload: payload))
            }
            return items
        }
    }

    /// Where one delivery goes next, as the worker decided it.
    public struct Decision: Sendable {
        public var sequence: Int64
        public var notificationID: String
        public var state: DeliveryState
        public var status: Int
        public var reason: String
        /// Pending: when to try again, Unix ms.
        public var nextAttemptAt: Int64
        /// Set when the handle is dead and registration must delete it.
        public var removal: (platform: Platform, handle: String, since: Int64)?
    }

    /// Records a batch's results, queues handle removals, and finishes each notification that has
    /// nothing pending any more. Returns the notifications finished, with their final state.
    @discardableResult
    public func record(_ decisions: [Decision]) async throws -> [(id: String, state: OutcomeState)] {
        let at = now()
        return try await db.write { db in
            let update = try db.cachedStatement(
                sql: """
                    UPDATE delivery SET state = ?, leased = 0, last_status = ?, reason = ?, next_attempt_at = ?,
                           handle_removed = ?, updated_at = ?
                    WHERE sequence = ?
                    """)
            var touched = Set<String>()
            for d in decisions {
                try update.execute(arguments: [
                    d.state.rawValue, d.status, d.reason, d.nextAttemptAt, d.removal == nil ? 0 : 1, at, d.sequence,
                ])
                if let removal = d.removal {
                    try db.execute(
                        sql: "INSERT INTO handle_removal (platform, handle, invalid_since, created_at) VALUES (?, ?, ?, ?)",
                        arguments: [removal.platform.rawValue, removal.handle, removal.since, at])
                }
                if d.state != .pending { touched.insert(d.notificationID) }
            }
            var finished: [(String, OutcomeState)] = []
            for id in touched {
                let open = try Bool.fetchOne(
                    db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM delivery WHERE notification_id = ? AND state = 1)"),
                    arguments: [id]) ?? false
                guard !open else { continue }
                let abandoned = try Bool.fetchOne(
                    db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM delivery WHERE notification_id = ? AND state = 4)"),
                    arguments: [id]) ?? false
                let state: OutcomeState = abandoned ? .abandoned : .completed
                try db.execute(
                    sql: "UPDATE notification SET state = ?, updated_at = ? WHERE id = ? AND state IN (1, 2)",
                    arguments: [state.rawValue, at, id])
                if db.changesCount == 1 { finished.append((id, state)) }
            }
            return finished
        }
    }

    /// Dead handles registration has not confirmed deleting yet, oldest first.
    public func pendingRemovals(limit: Int) throws -> [(id: Int64, platform: Platform, handle: String, since: Int64)] {
        try db.read { db in
            try Row.fetchAll(
                db, sql: "SELECT id, platform, handle, invalid_since FROM handle_removal ORDER BY id LIMIT ?", arguments: [limit]
            ).map { ($0["id"], Platform(rawValue: $0["platform"]), $0["handle"], $0["invalid_since"]) }
        }
    }

    public func removalDone(_ id: Int64) throws {
        try db.write { db in try db.execute(sql: "DELETE FROM handle_removal WHERE id = ?", arguments: [id]) }
    }

    /// When the earliest pending, unleased delivery is due (Unix ms), if any.
    public func nextDue() throws -> Int64? {
        try db.read { db in
            try Int64.fetchOne(db, sql: "SELECT MIN(next_attempt_at) FROM delivery WHERE state = 1 AND leased = 0")
        }
    }

    /// Deliveries not finished yet, and handle removals not confirmed yet (for metrics).
    public func depth() throws -> (pending: Int, removals: Int) {
        try db.read { db in
            (
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM delivery WHERE state = 1") ?? 0,
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM handle_removal") ?? 0
            )
        }
    }

    /// A read on the outbox's database (tests).
    func read<T>(_ body: (Database) throws -> T) throws -> T { try db.read(body) }

    /// Per-platform counts of one notification, computed from its deliveries.
    func platformOutcomes(of id: String, _ db: Database) throws -> [PlatformOutcome] {
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT platform, state, reason, COUNT(*) AS n, SUM(handle_removed) AS removed,
                       SUM(MAX(attempts - 1, 0)) AS retries
                FROM delivery WHERE notification_id = ? GROUP BY platform, state, reason ORDER BY platform, reason
                """,
            arguments: [id])
        var outcomes: [Platform: PlatformOutcome] = [:]
        for row in rows {
            let platform = Platform(rawValue: row["platform"])
            var outcome = outcomes[platform] ?? PlatformOutcome(platform: platform)
            let n: Int64 = row["n"]
            outcome.retries += row["retries"] as Int64
            outcome.removedHandles += row["removed"] as Int64
            switch DeliveryState(rawValue: row["state"]) {
            case .delivered: outcome.success += n
            case .pending: outcome.pending += n
            case .abandoned:
                outcome.failure += n
                outcome.failures.append(FailureCount(reason: "Abandoned", count: n))
            default:
                outcome.failure += n
                outcome.failures.append(FailureCount(reason: row["reason"], count: n))
            }
            outcomes[platform] = outcome
        }
        return outcomes.values.sorted { $0.platform.rawValue < $1.platform.rawValue }.map { outcome in
            var merged: [String: Int64] = [:]
            for failure in outcome.failures { merged[failure.reason, default: 0] += failure.count }
            var sorted = outcome
            sorted.failures = merged.sorted { $0.key < $1.key }.map { FailureCount(reason: $0.key, count: $0.value) }
            return sorted
        }
    }

    /// The deliveries of one notification, in outbox order.
    func deliveries(of id: String, after: Int64, limit: Int, _ db: Database) throws -> [DeliveryRecord] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT sequence, registration_id, platform, state, attempts, message_id, last_status, reason, next_attempt_at
                FROM delivery WHERE notification_id = ? AND sequence > ? ORDER BY sequence LIMIT ?
                """,
            arguments: [id, after, limit]
        ).map { row in
            let state = DeliveryState(rawValue: row["state"])
            return DeliveryRecord(
                sequence: row["sequence"], registrationID: row["registration_id"], platform: Platform(rawValue: row["platform"]),
                state: state, attempts: row["attempts"], messageID: row["message_id"], lastStatus: row["last_status"],
                reason: row["reason"], nextAttemptAtUnixMs: state == .pending ? row["next_attempt_at"] : 0)
        }
    }

    private static func payloads(of id: String, _ db: Database) throws -> [Platform: OutboxPayload] {
        var payloads: [Platform: OutboxPayload] = [:]
        for row in try Row.fetchAll(
            db.cachedStatement(
                sql: "SELECT platform, headers, body, expires_at, collapse_id FROM outbox_payload WHERE notification_id = ?"),
            arguments: [id])
        {
            let platform = Platform(rawValue: row["platform"])
            let body: Data = row["body"]
            payloads[platform] = OutboxPayload(
                platform: platform, headers: decode(row["headers"]), body: [UInt8](body), expiresAt: row["expires_at"],
                collapseID: row["collapse_id"])
        }
        return payloads
    }

    static func encode(_ headers: [Header]) -> String {
        let data = try! JSONSerialization.data(withJSONObject: headers.map { [$0.name, $0.value] })
        return String(decoding: data, as: UTF8.self)
    }

    static func decode(_ json: String) -> [Header] {
        let pairs = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [[String]] ?? []
        return pairs.compactMap { $0.count == 2 ? Header(name: $0[0], value: $0[1]) : nil }
    }
}
