import Foundation
import GRDB
import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldSQL
import HeraldService
import Logging
import NIOCore
import PostgresNIO
public import PushProviders

/// The provider used when no push credentials are configured: records every push it would have
/// sent (platform, handle, headers, exact bytes) in dispatch's own database, so a developer, the
/// `herald inbox` command and the tests can see exactly what a device would get.
///
/// Its table lives in dispatch's own database, beside the outbox, so the worker claims, writes and
/// records each batch in one transaction: delivered exactly once.
public struct InboxProvider: PushSender {
    /// The outbox's database: written once for both (see ``Outbox``).
    private let sql: any SQLDatabase

    /// `db` is the outbox's (``Outbox/init(db:replica:lease:now:)``).
    public init(db: SQLiteDatabase) throws {
        sql = db
        try DispatchSchema.migrate(db)
    }

    /// The inbox of a PostgreSQL outbox (made first: its migrations create the table).
    public init(postgres: HeraldPostgres) {
        sql = postgres.sql
    }

    /// Forgets everything recorded (ResetForTests).
    public func deleteEverything() async throws -> Int64 {
        Int64(try await sql.execute("DELETE FROM inbox"))
    }

    public func send(_ items: [PushItem]) async -> [PushResult] {
        do {
            try await record(items)
            return Array(repeating: .delivered(status: 200), count: items.count)
        } catch {
            return Array(repeating: .retry(status: 0, reason: "InboxWriteFailed", after: nil), count: items.count)
        }
    }

    private func record(_ items: [PushItem]) async throws {
        try await sql.transaction { session in try await write(items, in: session) }
    }

    /// Records `items` in the outbox's own transaction (the claim's: exactly once).
    public func write(_ items: [PushItem], in session: any SQLSession) async throws {
        let source = SQLRowSource(count: items.count)
            .texts("notification_id", items.map(\.notificationID))
            .texts("registration_id", items.map(\.registrationID))
            .integers("platform", items.map { Int64($0.platform.rawValue) })
            .texts("handle", items.map(\.handle))
            .texts("headers", Self.headers(of: items))
            // The claim made one payload per send, platform and variant: the rows share its bytes.
            .bytes("payload", items.map(\.payload.body))
        try await session.execute(
            """
            INSERT INTO inbox (notification_id, registration_id, platform, handle, headers, payload, recorded_at)
            SELECT u.notification_id, u.registration_id, u.platform, u.handle, u.headers, u.payload, \(unixMillis())
            FROM \(rows: source) \(SQLRowSource.inOrder)
            """)
    }

    /// Each item's headers as JSON. A batch shares one payload per platform and variant: its
    /// headers are encoded once, not per row. (A payload is fixed per notification, platform and
    /// variant, so that triple identifies it; a template send's devices alternate between its
    /// variants, one rendering per distinct template.)
    static func headers(of items: [PushItem]) -> [String] {
        var encoded: [OutboxPayload.Key: (notificationID: String, headers: String)] = [:]
        return items.map { item in
            let key = item.payload.key
            if let cached = encoded[key], cached.notificationID == item.notificationID { return cached.headers }
            let headers = Self.encode(Self.headers(item.payload))
            encoded[key] = (item.notificationID, headers)
            return headers
        }
    }

    /// The headers the platform's real sender derives from the push's options (all of them: its
    /// type, priority, content type, expiry and collapse id as that platform spells them).
    static func headers(_ payload: OutboxPayload) -> [Header] {
        switch payload.platform {
        case .apns: APNsSender.headers(for: payload.options)
        case .fcm: FCMSender.headers(for: payload.options)
        case .wns: WNSSender.headers(for: payload.options)
        case .browser: WebPushSender.headers(for: payload.options)
        default: []
        }
    }

    /// The `headers` column: a JSON list of `[name, value]` pairs.
    static func encode(_ headers: [Header]) -> String {
        "["
            + headers.map { "[" + jsonStringLiteral($0.name) + "," + jsonStringLiteral($0.value) + "]" }.joined(
                separator: ",")
            + "]"
    }

    static func decode(_ json: String) -> [Header] {
        let pairs = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [[String]] ?? []
        return pairs.compactMap { $0.count == 2 ? Header(name: $0[0], value: $0[1]) : nil }
    }

    /// Deletes pushes recorded before `before` (Unix ms), 10,000 per statement; returns how many.
    @discardableResult
    public func purge(before: Int64) async throws -> Int {
        try await sql.deleteInBatches(batch: 10000) {
            "DELETE FROM inbox WHERE sequence IN (SELECT sequence FROM inbox WHERE recorded_at < \(before) LIMIT 10000)"
        }
    }

    /// Which end of the inbox a page starts from.
    public enum Page: Sendable {
        /// Sequences above this, oldest first (a device polling for its own pushes).
        case after(Int64)
        /// Sequences below this (0: from the newest), newest first (the console).
        case newestBefore(Int64)

        /// The condition on `sequence` and the order, for both databases.
        var sql: (condition: String, order: String, bound: Int64) {
            switch self {
            case .after(let after): ("sequence > ", "sequence", after)
            case .newestBefore(let before): ("sequence < ", "sequence DESC", before > 0 ? before : Int64.max)
            }
        }
    }

    /// Recorded pushes, one page; only those to `handle` when it is not empty.
    public func list(after: Int64, limit: Int, handle: String = "") async throws -> [InboxEntry] {
        try await list(.after(after), limit: limit, handle: handle)
    }

    /// Recorded pushes, one page from either end; only those to `handle` when it is not empty.
    ///
    /// On PostgreSQL, replicas write concurrently, so a sequence can commit after a higher one: a
    /// poller that follows `after` may step over a push committed late. The inbox is for
    /// development and tests, which read it after the send's outcome completed.
    public func list(_ page: Page, limit: Int, handle: String = "") async throws -> [InboxEntry] {
        let (condition, order, bound) = page.sql
        var query: SQLQuery = "SELECT \(raw: Self.columns) FROM inbox WHERE \(raw: condition)\(bound)"
        if !handle.isEmpty { query += " AND handle = \(handle)" }
        query += " ORDER BY \(raw: order) LIMIT \(Int64(limit))"
        return try await sql.query(query, Self.entry)
    }

    /// The columns ``entry(_:)`` reads, in its order.
    static let columns = "sequence, notification_id, registration_id, platform, handle, headers, payload, recorded_at"

    /// One row of ``columns``.
    static func entry(_ row: SQLRow) throws -> InboxEntry {
        InboxEntry(
            sequence: try row[0], notificationID: try row[1], registrationID: try row[2],
            platform: Platform(rawValue: try row[3]), handle: try row[4], headers: decode(try row[5]),
            payload: try row[6], recordedAtUnixMs: try row[7])
    }
}

/// Dispatch's SQLite database as a whole: the outbox and the inbox share one file.
public enum DispatchDatabase {
    /// Every migration this build can apply to it (what `herald restore` checks a backup against).
    public static var migrations: [String] { DispatchSchema.schema.sqliteMigrationNames }
}
