import Foundation
import GRDB
import HeraldModel
public import HeraldProto

/// Claims and leases: what is due, taken by a worker, or recovered after a crash.
extension Outbox {
    /// `[1,2,3]`: a batch's sequences as one SQL argument, read back with `json_each`.
    static func jsonList(_ sequences: [Int64]) -> String {
        var text = "["
        text.reserveCapacity(sequences.count * 8 + 2)
        for (index, sequence) in sequences.enumerated() {
            if index > 0 { text += "," }
            text += String(sequence)
        }
        return text + "]"
    }

    /// Makes every delivery leased by a previous process due now (its attempt was counted, so it
    /// shows as retried). Call once at start-up, before any worker runs.
    @discardableResult
    public func recoverLeases() async throws -> Int {
        try await sqlite.write { [now] db in
            try db.execute(
                sql: """
                    UPDATE notification_platform SET retries = retries + (
                        SELECT COUNT(*) FROM delivery d
                        WHERE d.notification_id = notification_platform.notification_id
                          AND d.platform = notification_platform.platform AND d.leased = 1 AND d.state = \(DeliveryState.pending.rawValue))
                    WHERE notification_id IN (SELECT DISTINCT notification_id FROM delivery WHERE leased = 1 AND state = \(DeliveryState.pending.rawValue))
                    """)
            try db.execute(
                sql: "UPDATE delivery SET leased = 0, next_attempt_at = ? WHERE leased = 1 AND state = ?",
                arguments: [now(), DeliveryState.pending.rawValue])
            return db.changesCount
        }
    }

    /// SQLite's leases end only with the process that holds them: nothing to renew.
    public var leaseRenewalInterval: Duration? { nil }

    public func renewLeases(_ held: [(sequence: Int64, attempt: Int)]) async throws -> Int { 0 }

    /// Claims up to `limit` due deliveries of `platforms`: counts their attempt and leases them, in
    /// one transaction.
    public func claim(limit: Int, platforms: [Platform]) async throws -> [PushItem] {
        let at = now()
        return try await sqlite.write { db in
            try self.due(limit: limit, platforms: platforms, lease: true, at: at, db)
        }
    }

    /// Delivers up to `limit` due deliveries of `platforms` to the inbox, which is in this same
    /// database, and records them, in one transaction: exactly once, with no lease. Returns how
    /// many, per platform, and the notifications this finished.
    public func deliverLocally(
        limit: Int, platforms: [Platform], inbox: InboxProvider
    ) async throws -> (delivered: [Platform: Int], finished: [(id: String, state: OutcomeState)]) {
        let at = now()
        return try await sqlite.write { db in
            let items = try self.due(limit: limit, platforms: platforms, lease: false, at: at, db)
            guard !items.isEmpty else { return ([:], []) }
            try inbox.write(items, in: db)
            let (delivered, decisions) = Self.deliveredLocally(items, at: at)
            return (delivered, try self.apply(decisions, at: at, db))
        }
    }

    /// One platform's due deliveries, oldest first: one ordered range of `delivery_due`
    /// (platform, next_attempt_at, sequence), however many rows other platforms have due.
    static let dueOfPlatform = """
        SELECT sequence, notification_id, registration_id, platform, handle, message_id, attempts, give_up_at, variant,
               next_attempt_at
        FROM delivery WHERE state = \(DeliveryState.pending.rawValue) AND leased = 0 AND platform = ? AND next_attempt_at <= ?
        ORDER BY next_attempt_at, sequence LIMIT ?
        """

    /// Due deliveries of `platforms`, oldest first across them; with `lease`, each is leased and
    /// its attempt counted.
    func due(limit: Int, platforms: [Platform], lease: Bool, at: Int64, _ db: Database) throws -> [PushItem] {
        guard !platforms.isEmpty, limit > 0 else { return [] }
        // Up to `limit` of each platform, then the oldest `limit` of them all: the order a single
        // query over every platform would give, without reading other platforms' rows.
        let statement = try db.cachedStatement(sql: Self.dueOfPlatform)
        let ranges = try platforms.map { try Row.fetchAll(statement, arguments: [$0.rawValue, at, limit]) }
            .filter { !$0.isEmpty }
        guard var rows = ranges.first else { return [] }
        if ranges.count > 1 {
            rows = ranges.flatMap { $0 }
                .map { (due: $0[9] as Int64, sequence: $0[0] as Int64, row: $0) }
                .sorted { ($0.due, $0.sequence) < ($1.due, $1.sequence) }
                .prefix(limit).map(\.row)
        }
        var payloads: [String: [OutboxPayload.Key: OutboxPayload]] = [:]
        var hubs: [String: String] = [:]
        var items: [PushItem] = []
        items.reserveCapacity(rows.count)
        // Columns by position: GRDB's by-name look-up lower-cases the name on every access.
        for row in rows {
            let notificationID: String = row[1]
            let platform = Platform(rawValue: row[3])
            if payloads[notificationID] == nil {
                payloads[notificationID] = try Self.payloads(of: notificationID, db)
                hubs[notificationID] =
                    try String.fetchOne(
                        db.cachedStatement(sql: "SELECT hub FROM notification WHERE id = ?"),
                        arguments: [notificationID])
                try db.execute(
                    sql: "UPDATE notification SET state = ?, updated_at = ?, started_at = ? WHERE id = ? AND state = ?",
                    arguments: [
                        OutcomeState.processing.rawValue, at, at, notificationID, OutcomeState.enqueued.rawValue,
                    ])
            }
            // Send stores a payload for every platform it targets, in the same transaction.
            guard let payload = payloads[notificationID]?[OutboxPayload.Key(platform: platform, variant: row[8])] else {
                continue
            }
            let sequence: Int64 = row[0]
            let attempts: Int = row[6]
            items.append(
                PushItem(
                    sequence: sequence, notificationID: notificationID, registrationID: row[2],
                    platform: platform, handle: row[4], messageID: row[5], attempt: attempts + 1,
                    giveUpAt: row[7], payload: payload, hub: hubs[notificationID] ?? Names.defaultHub))
        }
        if lease {
            // One statement for the whole batch: a statement per row cost as much as the row's own update.
            try db.cachedStatement(
                sql:
                    "UPDATE delivery SET leased = 1, attempts = attempts + 1, updated_at = ? WHERE sequence IN (SELECT value FROM json_each(?))"
            ).execute(arguments: [at, Self.jsonList(items.map(\.sequence))])
        }
        return items
    }
}
