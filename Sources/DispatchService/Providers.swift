import Foundation
public import GRDB
public import HeraldProto
import HeraldRPC

/// Where deliveries go. Real senders (APNs, FCM, WNS, Web Push) implement this next to the inbox.
public protocol PushProvider: Sendable {
    /// Delivers a batch; returns, per delivery in order, whether the provider accepted it.
    func deliver(_ deliveries: [Delivery]) async throws -> [Bool]
}

/// The provider used when no push credentials are configured: records every push it would have
/// sent (platform, handle, headers, exact bytes) in dispatch's own database, so a developer, the
/// `herald inbox` command and the tests can see exactly what a device would get.
public struct InboxProvider: PushProvider {
    private let db: any DatabaseWriter

    public init(db: any DatabaseWriter) throws {
        self.db = db
        try Self.migrator.migrate(db)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("inbox-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE inbox (
                        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                        notification_id TEXT NOT NULL,
                        registration_id TEXT NOT NULL,
                        platform INTEGER NOT NULL,
                        handle TEXT NOT NULL,
                        headers TEXT NOT NULL,
                        payload BLOB NOT NULL,
                        recorded_at INTEGER NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("inbox-v2-handle-index") { db in
            try db.execute(sql: "CREATE INDEX inbox_handle ON inbox(handle, sequence)")
        }
        return migrator
    }

    public func deliver(_ deliveries: [Delivery]) async throws -> [Bool] {
        let now = unixMillis()
        try await db.write { db in
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO inbox (notification_id, registration_id, platform, handle, headers, payload, recorded_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """)
            // A batch shares one payload per platform: encode its headers and body once, not per row.
            var encoded: [Platform: (source: [Header], headers: String, body: Data)] = [:]
            for d in deliveries {
                let shared: (source: [Header], headers: String, body: Data)
                if let cached = encoded[d.platform], cached.source == d.headers, cached.body.elementsEqual(d.body) {
                    shared = cached
                } else {
                    let headers = try JSONSerialization.data(withJSONObject: d.headers.map { [$0.name, $0.value] })
                    shared = (d.headers, String(decoding: headers, as: UTF8.self), Data(d.body))
                    encoded[d.platform] = shared
                }
                try insert.execute(arguments: [
                    d.notificationID, d.registrationID, d.platform.rawValue, d.handle, shared.headers, shared.body, now,
                ])
            }
        }
        return Array(repeating: true, count: deliveries.count)
    }

    /// Recorded pushes with a sequence above `after`, oldest first; only those to `handle` when it
    /// is not empty (a device polling for its own pushes).
    public func list(after: Int64, limit: Int, handle: String = "") throws -> [InboxEntry] {
        try db.read { db in
            try Row.fetchAll(
                db,
                sql: handle.isEmpty
                    ? "SELECT * FROM inbox WHERE sequence > ? ORDER BY sequence LIMIT ?"
                    : "SELECT * FROM inbox WHERE sequence > ? AND handle = ? ORDER BY sequence LIMIT ?",
                arguments: handle.isEmpty ? [after, limit] : [after, handle, limit]
            ).map { row in
                let headersJSON: String = row["headers"]
                let pairs = (try? JSONSerialization.jsonObject(with: Data(headersJSON.utf8))) as? [[String]] ?? []
                let payload: Data = row["payload"]
                return InboxEntry(
                    sequence: row["sequence"], notificationID: row["notification_id"],
                    registrationID: row["registration_id"], platform: Platform(rawValue: row["platform"]),
                    handle: row["handle"], headers: pairs.compactMap { $0.count == 2 ? Header(name: $0[0], value: $0[1]) : nil },
                    payload: [UInt8](payload), recordedAtUnixMs: row["recorded_at"])
            }
        }
    }
}
