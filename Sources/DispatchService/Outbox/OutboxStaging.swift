import Foundation
import GRDB
import HeraldModel
public import HeraldProto
import HeraldRPC

/// A large audience spilled to disk while it streams in.
///
/// A send is all or nothing: nothing of it may be delivered before its commit, and a send that
/// fails before its commit leaves nothing. Keeping the whole audience in memory until then cost
/// about 250 bytes per device (291 MB of peak RSS for a million). So past `audience-memory-rows`
/// targets (``Outbox/StagedAudience/spillThreshold`` by default), the audience goes in chunks to
/// `audience_staging`, which no worker reads; the commit (``Outbox/enqueue(id:sender:targetUser:targetTag:payloads:targets:staged:retryWindow:hub:scheduled:)``)
/// moves it into `delivery` with one `INSERT … SELECT` in the same transaction as the rest. A send
/// that fails discards its rows; rows left by a process that died mid-send are deleted at start.
extension Outbox {
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
        /// Names this staging attempt's rows on PostgreSQL, where two replicas may race to make
        /// one scheduled send (SQLite's one process keys them by `notificationID`).
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

    /// Appends `targets` to `staged`'s rows, in one transaction.
    public func stage(_ targets: [Target], to staged: inout StagedAudience) async throws {
        guard !targets.isEmpty else { return }
        let id = staged.notificationID
        let start = staged.count
        let ids = staged.messageIDs
        try await sqlite.write { db in
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO audience_staging (notification_id, position, registration_id, platform, handle, message_id, variant)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """)
            for (offset, target) in targets.enumerated() {
                try insert.execute(arguments: [
                    id, start + offset, target.registrationID, target.platform.rawValue, target.handle,
                    ids.id(start + offset), target.variant,
                ])
            }
        }
        staged.record(targets)
    }

    /// Deletes a send's staged rows (it failed before its commit). Best effort: rows it leaves are
    /// deleted at the next start.
    public func discardStaged(_ staged: StagedAudience) async { await discardStaged(staged.notificationID) }

    public func discardStaged(_ notificationID: String) async {
        _ = try? await sqlite.write { db in
            try db.execute(sql: "DELETE FROM audience_staging WHERE notification_id = ?", arguments: [notificationID])
        }
    }

    /// Rows of sends that never committed (their process stopped mid-send). Call once at start-up.
    @discardableResult
    public func deleteAbandonedStaging() async throws -> Int {
        try await sqlite.write { db in
            try db.execute(sql: "DELETE FROM audience_staging")
            return db.changesCount
        }
    }
}
