import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldService

/// A large audience spilled to disk while it streams in.
///
/// A send is all or nothing: nothing of it may be delivered before its commit, and a send that
/// fails before its commit leaves nothing. Keeping the whole audience in memory until then cost
/// about 250 bytes per device (291 MB of peak RSS for a million). So past `audience-memory-rows`
/// targets (``Outbox/StagedAudience/spillThreshold`` by default), the audience goes in chunks to
/// `audience_staging`, which no worker reads; the commit (``Outbox/enqueue(id:sender:targetUser:targetTag:payloads:targets:staged:retryWindow:hub:scheduled:)``)
/// moves it into `delivery` with one `INSERT … SELECT` in the same transaction as the rest. A send
/// that fails discards its rows; rows left by a process that died mid-send are deleted at start
/// (``Outbox/deleteAbandonedStaging()``).
extension Outbox {
    /// Staged rows older than this belong to no send in progress (the replica staging them died).
    static let stagingAge: Int64 = 3_600_000

    /// `state = \(pendingState)`: written in the text, not bound, where a statement must use
    /// `delivery_due`: SQLite's planner takes a partial index only for a condition it can read.
    static let pendingState = SQLQuery(raw: String(DeliveryState.pending.rawValue))

    /// One platform's due deliveries, oldest first: one ordered range of `delivery_due`
    /// (platform, next_attempt_at, sequence), however many rows other platforms have due. On
    /// PostgreSQL, rows another replica is claiming are skipped.
    static func dueOfPlatform(_ platform: Platform, at: Int64, limit: Int) -> SQLQuery {
        """
        SELECT sequence, notification_id, registration_id, platform, handle, message_id, attempts, give_up_at,
               variant, leased_by, next_attempt_at
        FROM delivery
        WHERE state = \(pendingState) AND platform = \(platform.rawValue) AND next_attempt_at <= \(at)
        ORDER BY next_attempt_at, sequence LIMIT \(limit) \(SQLFragment.skipLocked)
        """
    }

    /// The part of one send's audience staged so far.
    public struct StagedAudience: Sendable {
        /// Targets held in memory before a chunk is written, unless configured.
        public static let spillThreshold = 20_000

        public let notificationID: String
        /// Rows staged so far; the next one's position.
        public private(set) var count = 0
        /// Staged rows per platform, for the send's counters.
        public private(set) var perPlatform: [Platform: Int] = [:]
        /// The send's message ids, by position: staged rows and the in-memory rest number on
        /// from one another, as if they had never been apart.
        let messageIDs = MessageIDs()
        /// Names this staging attempt's rows: two replicas may race to make one scheduled send,
        /// and neither may mix or delete the other's rows.
        public let key: String

        public init(notificationID: String) {
            self.notificationID = notificationID
            key = notificationID + "." + randomHex(words: 1)
        }

        mutating func record(_ targets: [Target]) {
            count += targets.count
            for target in targets { perPlatform[target.platform, default: 0] += 1 }
        }
    }
}
