import Foundation
public import GRDB
public import HeraldProto
public import HeraldRPC

/// Rich and secure content in SQLite.
///
/// Ids come from an AUTOINCREMENT key: allocated atomically by SQLite (the tutorial used
/// `list.Count`, a race) and never reused, so an old push can never point at newer content.
public final class PayloadStore: Sendable {
    private let db: any DatabaseWriter
    /// Lifetime of content stored with `ttl_seconds` 0.
    public let defaultTTL: Int64
    /// Largest content accepted, in bytes.
    public let maxContentBytes: Int
    /// Unix epoch milliseconds; injected by tests that check expiry without waiting.
    private let now: @Sendable () -> Int64

    public init(
        db: any DatabaseWriter, defaultTTLSeconds: Int64 = 7 * 24 * 3600, maxContentBytes: Int = 5 << 20,
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) throws {
        self.db = db
        self.defaultTTL = defaultTTLSeconds
        self.maxContentBytes = maxContentBytes
        self.now = now
        try Self.migrator.migrate(db)
    }

    public static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE payload (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        recipient TEXT NOT NULL,
                        sender TEXT NOT NULL DEFAULT '',
                        kind INTEGER NOT NULL,
                        content BLOB NOT NULL,
                        content_type TEXT NOT NULL,
                        message TEXT NOT NULL DEFAULT '',
                        rich_type TEXT NOT NULL DEFAULT '',
                        read INTEGER NOT NULL DEFAULT 0,
                        created_at INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL
                    );
                    """)
        }
        return migrator
    }

    /// Deletes expired content; returns how many notifications were removed.
    ///
    /// The database is opened with `secure_delete` (see ``PayloadServer``), so SQLite overwrites the
    /// freed pages with zeros, and the WAL is checkpointed and truncated afterwards: expired content
    /// leaves no copy in either file.
    public func purgeExpired() throws -> Int {
        let purged = try db.write { db in
            try db.execute(sql: "DELETE FROM payload WHERE expires_at <= ?", arguments: [now()])
            return db.changesCount
        }
        if purged > 0, let pool = db as? DatabasePool {
            try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
        }
        return purged
    }

    public func store(_ request: StorePayloadRequest) throws -> StorePayloadResponse {
        guard !request.recipient.isEmpty else { throw ServiceError.invalidArgument("recipient is required") }
        guard request.kind == .secure || request.kind == .rich else {
            throw ServiceError.invalidArgument("kind must be PAYLOAD_KIND_SECURE or PAYLOAD_KIND_RICH")
        }
        guard request.content.count <= maxContentBytes else {
            throw ServiceError(.resourceExhausted, "content is \(request.content.count) bytes; the limit is \(maxContentBytes)")
        }
        guard request.ttlSeconds >= 0 else { throw ServiceError.invalidArgument("ttl_seconds must not be negative") }
        let now = self.now()
        let ttl = request.ttlSeconds == 0 ? defaultTTL : request.ttlSeconds
        let expires = now + ttl * 1000
        let contentType = request.contentType.isEmpty
            ? (request.kind == .secure ? "text/plain; charset=utf-8" : "application/octet-stream")
            : request.contentType
        let id = try db.write { db in
            try db.execute(
                sql: """
                    INSERT INTO payload (recipient, sender, kind, content, content_type, message, rich_type,
                                         created_at, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    request.recipient, request.sender, request.kind.rawValue, Data(request.content), contentType,
                    request.message, request.richType, now, expires,
                ])
            return db.lastInsertedRowID
        }
        return StorePayloadResponse(id: id, expiresAtUnixMs: expires)
    }

    /// Hands content to its recipient and marks it read; `read` in the answer is the flag as it was.
    ///
    /// Reads first and writes only on the first read: every later fetch is a WAL read that never
    /// waits for (or holds) the single writer. Two first reads racing both answer "unread", which is
    /// true for both: neither saw it read.
    public func fetch(id: Int64, requester: String) throws -> FetchPayloadResponse {
        let notFound = ServiceError.notFound("notification \(id) not found")
        guard !requester.isEmpty else { throw notFound }
        // Cached statements: preparing one costs more than running it (GRDB's authorizer sees every column).
        let row = try db.read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT kind, content, content_type, message, rich_type, read, created_at FROM payload
                        WHERE id = ? AND recipient = ? AND expires_at > ?
                        """),
                arguments: [id, requester, now()])
        }
        guard let row else { throw notFound }
        let wasRead: Bool = row["read"]
        if !wasRead {
            try db.write { db in try db.cachedStatement(sql: "UPDATE payload SET read = 1 WHERE id = ?").execute(arguments: [id]) }
        }
        let content: Data = row["content"]
        return FetchPayloadResponse(
            id: id, kind: PayloadKind(rawValue: row["kind"]), content: [UInt8](content),
            contentType: row["content_type"], message: row["message"], richType: row["rich_type"],
            read: wasRead, createdAtUnixMs: row["created_at"])
    }
}
