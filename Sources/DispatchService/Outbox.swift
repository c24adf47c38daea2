import Foundation
public import GRDB
public import HeraldProto
public import HeraldRPC
public import HeraldModel
public import HeraldService

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

/// The message ids of one send's deliveries: version-4 UUIDs from 122 random bits drawn once per
/// send, the low word XOR-ed with the delivery's index. Unique within the send by construction and
/// across sends by the random bits, at a fraction of the cost of a `UUID()` (system random bytes
/// and formatting) per device of a large fan-out.
struct MessageIDs {
    private let high: UInt64
    private let low: UInt64

    init() {
        var generator = SystemRandomNumberGenerator()
        // Version 4 in the high word; the variant (10) in the top bits of the low word.
        high = (generator.next() & ~0xF000) | 0x4000
        low = (generator.next() & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
    }

    func id(_ index: Int) -> String {
        let low = self.low ^ UInt64(index & 0x3FFF_FFFF_FFFF_FFFF)
        var out = [UInt8]()
        out.reserveCapacity(36)
        // 32 hex digits, high word first, grouped 8-4-4-4-12.
        for position in 0..<32 {
            if position == 8 || position == 12 || position == 16 || position == 20 { out.append(UInt8(ascii: "-")) }
            let word = position < 16 ? high : low
            out.append(Self.digits[Int((word >> UInt64(60 - 4 * (position % 16))) & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static let digits = Array("0123456789abcdef".utf8)
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
        migrator.registerMigration("notification-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE notification (
                        id TEXT PRIMARY KEY NOT NULL,
                        sender TEXT NOT NULL,
                        target_user TEXT NOT NULL,
                        target_tag TEXT NOT NULL,
                        state INTEGER NOT NULL,
                        created_at INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL
                    );
                    CREATE TABLE notification_platform (
                        notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                        platform INTEGER NOT NULL,
                        success INTEGER NOT NULL,
                        failure INTEGER NOT NULL,
                        PRIMARY KEY (notification_id, platform)
                    ) WITHOUT ROWID;
                    """)
        }
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
                    -- ListDeliveries' order. Not (notification_id, state): every result would move its entry.
                    CREATE INDEX delivery_notification ON delivery(notification_id, sequence);
                    -- Counters kept by record(), so an outcome costs a few rows however large the send.
                    ALTER TABLE notification_platform ADD COLUMN pending INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE notification_platform ADD COLUMN removed INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE notification_platform ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE notification_failure (
                        notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                        platform INTEGER NOT NULL,
                        reason TEXT NOT NULL,
                        count INTEGER NOT NULL,
                        PRIMARY KEY (notification_id, platform, reason)
                    ) WITHOUT ROWID;
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
            var perPlatform: [Platform: Int] = [:]
            let ids = MessageIDs()
            for (index, target) in targets.enumerated() {
                try insert.execute(arguments: [
                    id, target.registrationID, target.platform.rawValue, target.handle, ids.id(index),
                    DeliveryState.pending.rawValue, created, giveUp, created,
                ])
                perPlatform[target.platform, default: 0] += 1
            }
            for (platform, count) in perPlatform {
                try db.execute(
                    sql: """
                        INSERT INTO notification_platform (notification_id, platform, success, failure, pending)
                        VALUES (?, ?, 0, 0, ?)
                        """,
                    arguments: [id, platform.rawValue, count])
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
                sql: """
                    UPDATE notification_platform SET retries = retries + (
                        SELECT COUNT(*) FROM delivery d
                        WHERE d.notification_id = notification_platform.notification_id
                          AND d.platform = notification_platform.platform AND d.leased = 1 AND d.state = 1)
                    WHERE notification_id IN (SELECT DISTINCT notification_id FROM delivery WHERE leased = 1 AND state = 1)
                    """)
            try db.execute(
                sql: "UPDATE delivery SET leased = 0, next_attempt_at = ? WHERE leased = 1 AND state = ?",
                arguments: [now(), DeliveryState.pending.rawValue])
            return db.changesCount
        }
    }

    /// Claims up to `limit` due deliveries of `platforms`: counts their attempt and leases them, in
    /// one transaction.
    public func claim(limit: Int, platforms: [Platform]) async throws -> [PushItem] {
        let at = now()
        return try await db.write { db in try self.due(limit: limit, platforms: platforms, lease: true, at: at, db) }
    }

    /// Delivers up to `limit` due deliveries of `platforms` to a sender that writes into this same
    /// database (the inbox), and records them, in one transaction: exactly once, with no lease.
    /// Returns how many, per platform, and the notifications this finished.
    public func deliverLocally(
        limit: Int, platforms: [Platform], write: @escaping @Sendable ([PushItem], Database) throws -> Void
    ) async throws -> (delivered: [Platform: Int], finished: [(id: String, state: OutcomeState)]) {
        let at = now()
        return try await db.write { db in
            let items = try self.due(limit: limit, platforms: platforms, lease: false, at: at, db)
            guard !items.isEmpty else { return ([:], []) }
            try write(items, db)
            var delivered: [Platform: Int] = [:]
            let decisions = items.map { item in
                delivered[item.platform, default: 0] += 1
                return Decision(
                    sequence: item.sequence, notificationID: item.notificationID, platform: item.platform, state: .delivered,
                    status: 200, reason: "", nextAttemptAt: at, removal: nil, countsAttempt: true)
            }
            return (delivered, try self.apply(decisions, at: at, db))
        }
    }

    /// Due deliveries of `platforms`, oldest first; with `lease`, each is leased and its attempt counted.
    private func due(limit: Int, platforms: [Platform], lease: Bool, at: Int64, _ db: Database) throws -> [PushItem] {
        guard !platforms.isEmpty else { return [] }
        let list = platforms.map { String($0.rawValue) }.sorted().joined(separator: ",")
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT sequence, notification_id, registration_id, platform, handle, message_id, attempts, give_up_at
                    FROM delivery WHERE state = 1 AND leased = 0 AND next_attempt_at <= ? AND platform IN (\(list))
                    ORDER BY next_attempt_at, sequence LIMIT ?
                    """),
            arguments: [at, limit])
        guard !rows.isEmpty else { return [] }
        let leaseStatement = try db.cachedStatement(
            sql: "UPDATE delivery SET leased = 1, attempts = attempts + 1, updated_at = ? WHERE sequence = ?")
        var payloads: [String: [Platform: OutboxPayload]] = [:]
        var items: [PushItem] = []
        items.reserveCapacity(rows.count)
        // Columns by position: GRDB's by-name look-up lower-cases the name on every access.
        for row in rows {
            let notificationID: String = row[1]
            let platform = Platform(rawValue: row[3])
            if payloads[notificationID] == nil {
                payloads[notificationID] = try Self.payloads(of: notificationID, db)
                try db.execute(
                    sql: "UPDATE notification SET state = ?, updated_at = ? WHERE id = ? AND state = ?",
                    arguments: [OutcomeState.processing.rawValue, at, notificationID, OutcomeState.enqueued.rawValue])
            }
            // Send stores a payload for every platform it targets, in the same transaction.
            guard let payload = payloads[notificationID]?[platform] else { continue }
            let sequence: Int64 = row[0]
            if lease { try leaseStatement.execute(arguments: [at, sequence]) }
            let attempts: Int = row[6]
            items.append(PushItem(
                sequence: sequence, notificationID: notificationID, registrationID: row[2],
                platform: platform, handle: row[4], messageID: row[5], attempt: attempts + 1,
                giveUpAt: row[7], payload: payload))
        }
        return items
    }

    /// Where one delivery goes next, as the worker decided it.
    public struct Decision: Sendable {
        public var sequence: Int64
        public var notificationID: String
        public var platform: Platform
        public var state: DeliveryState
        public var status: Int
        public var reason: String
        /// Pending: when to try again, Unix ms.
        public var nextAttemptAt: Int64
        /// Set when the handle is dead and registration must delete it.
        public var removal: (platform: Platform, handle: String, since: Int64)?
        /// The attempt was not counted when claimed (local deliveries take no lease): count it now.
        public var countsAttempt = false
    }

    /// Records a batch's results, queues handle removals, and finishes each notification that has
    /// nothing pending any more. Returns the notifications finished, with their final state.
    @discardableResult
    public func record(_ decisions: [Decision]) async throws -> [(id: String, state: OutcomeState)] {
        let at = now()
        return try await db.write { db in try self.apply(decisions, at: at, db) }
    }

    private func apply(_ decisions: [Decision], at: Int64, _ db: Database) throws -> [(id: String, state: OutcomeState)] {
        let update = try db.cachedStatement(
            sql: """
                UPDATE delivery SET state = ?, leased = 0, last_status = ?, reason = ?, next_attempt_at = ?,
                       handle_removed = ?, updated_at = ?, attempts = attempts + ?
                WHERE sequence = ?
                """)
        // Counter changes per (notification, platform), applied once per batch.
        struct Delta {
            var success = 0, failure = 0, pending = 0, removed = 0, retries = 0
            var failures: [String: Int] = [:]
        }
        var deltas: [String: [Platform: Delta]] = [:]
        for d in decisions {
            try update.execute(arguments: [
                d.state.rawValue, d.status, d.reason, d.nextAttemptAt, d.removal == nil ? 0 : 1, at, d.countsAttempt ? 1 : 0,
                d.sequence,
            ])
            if let removal = d.removal {
                try db.execute(
                    sql: "INSERT INTO handle_removal (platform, handle, invalid_since, created_at) VALUES (?, ?, ?, ?)",
                    arguments: [removal.platform.rawValue, removal.handle, removal.since, at])
            }
            var delta = deltas[d.notificationID]?[d.platform] ?? Delta()
            switch d.state {
            case .pending: delta.retries += 1
            case .delivered:
                delta.success += 1
                delta.pending -= 1
            default:
                delta.failure += 1
                delta.pending -= 1
                delta.failures[d.state == .abandoned ? "Abandoned" : d.reason, default: 0] += 1
                if d.removal != nil { delta.removed += 1 }
            }
            deltas[d.notificationID, default: [:]][d.platform] = delta
        }
        let counters = try db.cachedStatement(
            sql: """
                UPDATE notification_platform
                SET success = success + ?, failure = failure + ?, pending = pending + ?, removed = removed + ?,
                    retries = retries + ?
                WHERE notification_id = ? AND platform = ?
                """)
        let failures = try db.cachedStatement(
            sql: """
                INSERT INTO notification_failure (notification_id, platform, reason, count) VALUES (?, ?, ?, ?)
                ON CONFLICT (notification_id, platform, reason) DO UPDATE SET count = count + excluded.count
                """)
        var finished: [(String, OutcomeState)] = []
        for (id, platforms) in deltas {
            for (platform, delta) in platforms {
                try counters.execute(arguments: [
                    delta.success, delta.failure, delta.pending, delta.removed, delta.retries, id, platform.rawValue,
                ])
                for (reason, count) in delta.failures {
                    try failures.execute(arguments: [id, platform.rawValue, reason, count])
                }
            }
            guard platforms.values.contains(where: { $0.pending != 0 }) else { continue }
            let open = try Int.fetchOne(
                db.cachedStatement(sql: "SELECT SUM(pending) FROM notification_platform WHERE notification_id = ?"),
                arguments: [id]) ?? 0
            guard open == 0 else { continue }
            let abandoned = try Bool.fetchOne(
                db.cachedStatement(
                    sql: "SELECT EXISTS (SELECT 1 FROM notification_failure WHERE notification_id = ? AND reason = 'Abandoned')"),
                arguments: [id]) ?? false
            let state: OutcomeState = abandoned ? .abandoned : .completed
            try db.execute(
                sql: "UPDATE notification SET state = ?, updated_at = ? WHERE id = ? AND state IN (1, 2)",
                arguments: [state.rawValue, at, id])
            if db.changesCount == 1 { finished.append((id, state)) }
        }
        return finished
    }

    /// Deletes finished sends last changed before `before` (Unix ms): the notification, and by
    /// cascade its payloads, deliveries and counters. A hundred sends per transaction, so a purge
    /// of large sends never holds the writer long. Returns how many sends.
    @discardableResult
    public func purge(before: Int64) throws -> Int {
        try HeraldDatabase.deleteInBatches(
            db, batch: 100,
            sql: """
                DELETE FROM notification WHERE id IN (
                    SELECT id FROM notification WHERE state IN (3, 4, 5) AND updated_at < ? LIMIT 100)
                """,
            arguments: [before])
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

    /// The outcome of send `id`; with a `requester`, only if they sent it (NOT_FOUND otherwise, as
    /// for an unknown id, so ids of other users' sends cannot be probed).
    public func outcome(of id: String, requester: String = "") throws -> Outcome {
        try db.read { db in
            let row = try Self.notification(id, requester: requester, db)
            return Outcome(
                notificationID: id, state: OutcomeState(rawValue: row["state"]),
                platforms: try platformOutcomes(of: id, db), createdAtUnixMs: row["created_at"], sender: row["sender"])
        }
    }

    /// The outbox entries of send `id`, with the same visibility as ``outcome(of:requester:)``.
    public func deliveries(of id: String, requester: String = "", after: Int64, limit: Int) throws -> [DeliveryRecord] {
        try db.read { db in
            _ = try Self.notification(id, requester: requester, db)
            return try deliveries(of: id, after: after, limit: limit, db)
        }
    }

    private static func notification(_ id: String, requester: String, _ db: Database) throws -> Row {
        guard
            let row = try Row.fetchOne(db, sql: "SELECT state, created_at, sender FROM notification WHERE id = ?", arguments: [id]),
            requester.isEmpty || row["sender"] == requester
        else { throw ServiceError.notFound("notification \(id) not found") }
        return row
    }

    /// A read on the outbox's database (tests).
    func read<T>(_ body: (Database) throws -> T) throws -> T { try db.read(body) }

    /// Per-platform counts of one notification, from the counters ``record(_:)`` keeps.
    func platformOutcomes(of id: String, _ db: Database) throws -> [PlatformOutcome] {
        let failures = Dictionary(
            grouping: try Row.fetchAll(
                db, sql: "SELECT platform, reason, count FROM notification_failure WHERE notification_id = ? ORDER BY reason",
                arguments: [id]),
            by: { Platform(rawValue: $0["platform"]) })
        return try Row.fetchAll(
            db,
            sql: """
                SELECT platform, success, failure, pending, removed, retries FROM notification_platform
                WHERE notification_id = ? ORDER BY platform
                """,
            arguments: [id]
        ).map { row in
            let platform = Platform(rawValue: row["platform"])
            return PlatformOutcome(
                platform: platform, success: row["success"], failure: row["failure"], pending: row["pending"],
                failures: (failures[platform] ?? []).map { FailureCount(reason: $0["reason"], count: $0["count"]) },
                removedHandles: row["removed"], retries: row["retries"])
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
