import Foundation
import GRDB
import HeraldModel
public import HeraldProto

/// Reads of the SQLite outbox's own: inside its transactions, and for tests (the rest are
/// ``OutboxStore``'s, over its `sql`).
extension Outbox {
    /// A read on the outbox's database (tests).
    func read<T>(_ body: (Database) throws -> T) throws -> T { try db.read(body) }

    static func payloads(of id: String, _ db: Database) throws -> [OutboxPayload.Key: OutboxPayload] {
        var payloads: [OutboxPayload.Key: OutboxPayload] = [:]
        for row in try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT platform, body, push_type, priority, content_type, expires_at_ms, collapse_id, variant
                    FROM outbox_payload WHERE notification_id = ?
                    """),
            arguments: [id])
        {
            let platform = Platform(rawValue: row["platform"])
            let body: Data = row["body"]
            let options = DeliveryOptions(
                pushType: row["push_type"], priority: row["priority"], contentType: row["content_type"],
                expiresAtUnixMs: row["expires_at_ms"], collapseID: row["collapse_id"])
            let payload = OutboxPayload(
                platform: platform, options: options, body: [UInt8](body), variant: row["variant"])
            payloads[payload.key] = payload
        }
        return payloads
    }
}
