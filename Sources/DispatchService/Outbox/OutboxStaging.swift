import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC

/// A large audience spilled to disk while it streams in.
///
/// A send is all or nothing: nothing of it may be delivered before its commit, and a send that
/// fails before its commit leaves nothing. Keeping the whole audience in memory until then cost
/// about 250 bytes per device (291 MB of peak RSS for a million). So past `audience-memory-rows`
/// targets (``Outbox/StagedAudience/spillThreshold`` by default), the audience goes in chunks to
/// `audience_staging`, which no worker reads; the commit (``Outbox/enqueue(_:targets:staged:scheduled:)``)
/// moves it into `delivery` with one `INSERT … SELECT` in the same transaction as the rest. A send
/// that fails discards its rows; rows left by a process that died mid-send are deleted at start
/// (``Outbox/deleteAbandonedStaging()``).
extension Outbox {
    /// Staged rows older than this belong to no send in progress (the replica staging them died).
    static let stagingAge: Int64 = 3_600_000

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
