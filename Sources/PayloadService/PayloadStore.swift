import Foundation
public import GRDB
public import HeraldModel
public import HeraldProto
public import HeraldRPC
public import HeraldService

/// Rich and secure content, whichever database holds it: ``SQLitePayloadStore`` (embedded, one
/// process) or ``PostgresPayloadStore`` (shared by replicas). Both apply the same
/// ``PayloadRules`` before they write, so a request is refused the same way on either.
///
/// The requirements run on the caller's executor (`nonisolated(nonsending)`): FetchPayload starts
/// on the event loop that read the request, and SQLite's read answers there without a hop.
public protocol PayloadStore: Sendable {
    var rules: PayloadRules { get }
    /// Stores content; the id is allocated atomically and never reused, so an old push can never
    /// point at newer content.
    nonisolated(nonsending) func store(_ request: StorePayloadRequest) async throws -> StorePayloadResponse
    /// The content, for its recipient only and before it expires; `read` is the flag as it was.
    nonisolated(nonsending) func read(id: Int64, requester: String) async throws -> FetchPayloadResponse
    /// Sets the read flag after a first read. A full disk must not stop the recipient from
    /// reading: the flag is then set on a later read.
    nonisolated(nonsending) func markRead(id: Int64) async throws
    /// Deletes one notification's content for good; NOT_FOUND unless `recipient` is its recipient.
    ///
    /// The compensating step of a refused send: the edge stores, then sends, and deletes when the
    /// send is refused.
    nonisolated(nonsending) func delete(id: Int64, recipient: String) async throws
    /// Erase: deletes every content addressed to `user`; blanks the sender of content `user` sent
    /// (it stays its recipients'). Idempotent. A scan of the table: erases are rare, and an index
    /// on sender would cost every store.
    nonisolated(nonsending) func eraseUser(_ user: String) async throws -> (removed: Int64, redacted: Int64)
    /// Export: content addressed to or sent by `user`, by id after `after`.
    nonisolated(nonsending) func exportPage(user: String, after: Int64, limit: Int) async throws -> [StoredPayload]
    /// Deletes expired content; returns how many notifications were removed.
    nonisolated(nonsending) func purgeExpired() async throws -> Int
    /// Deletes all content (ResetForTests).
    nonisolated(nonsending) func deleteEverything() async throws -> Int64
}

/// One stored content, whole (an export's row).
public struct StoredPayload: Sendable {
    public var id: Int64
    public var recipient: String
    public var sender: String
    public var kind: PayloadKind
    public var content: [UInt8]
    public var contentType: String
    public var message: String
    public var richType: String
    public var read: Bool
    public var createdAt: Int64
    public var expiresAt: Int64
}

extension PayloadStore {
    public var maxContentBytes: Int { rules.maxContentBytes }

    /// Hands content to its recipient and marks it read; `read` in the answer is the flag as it was.
    ///
    /// Reads first and writes only on the first read, so later fetches never wait for a writer.
    /// Two first reads racing both answer "unread", which is true for both: neither saw it read.
    nonisolated(nonsending) public func fetch(id: Int64, requester: String) async throws -> FetchPayloadResponse {
        let answer = try await read(id: id, requester: requester)
        if !answer.read { try await markRead(id: id) }
        return answer
    }
}

/// What content may be stored, and until when: the checks every ``PayloadStore`` runs first.
public struct PayloadRules: Sendable {
    /// Lifetime of content stored with `ttl_seconds` 0, in seconds (the unit of `ttl_seconds`).
    public let defaultTTL: Int64
    /// Largest content accepted, in bytes.
    public let maxContentBytes: Int
    /// Unix epoch milliseconds; injected by tests that check expiry without waiting.
    public let now: @Sendable () -> Int64

    public init(
        defaultTTL: Duration = .seconds(7 * 24 * 3600), maxContentBytes: Int = 5 << 20,
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) {
        self.defaultTTL = min(max(defaultTTL.components.seconds, 1), ContentLimits.maxTTLSeconds)
        self.maxContentBytes = maxContentBytes
        self.now = now
    }

    /// A request that passed the checks, with its times and content type settled.
    public struct Admitted: Sendable {
        public var createdAt: Int64
        public var expiresAt: Int64
        public var contentType: String
    }

    public func admit(_ request: StorePayloadRequest) throws -> Admitted {
        guard Names.isValidUserName(request.recipient) else {
            throw ServiceError.invalidArgument("recipient must be a user name: \(Names.userNameRule)")
        }
        guard request.kind == .secure || request.kind == .rich else {
            throw ServiceError.invalidArgument("kind must be PAYLOAD_KIND_SECURE or PAYLOAD_KIND_RICH")
        }
        guard request.content.count <= maxContentBytes else {
            throw ServiceError(
                .resourceExhausted, "content is \(request.content.count) bytes; the limit is \(maxContentBytes)")
        }
        guard (0...ContentLimits.maxTTLSeconds).contains(request.ttlSeconds) else {
            throw ServiceError(
                .outOfRange, "ttl_seconds must be 0 (the default) to \(ContentLimits.maxTTLSeconds) (one year)")
        }
        // The type is served back as a response header: visible ASCII and spaces only, bounded.
        guard request.contentType.utf8.count <= 255, request.contentType.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7f })
        else {
            throw ServiceError.invalidArgument("content_type must be at most 255 characters of printable ASCII")
        }
        let now = self.now()
        let ttl = request.ttlSeconds == 0 ? defaultTTL : request.ttlSeconds
        // Checked: ttl is bounded above, but `now` is injected; an overflow must be an error, never a trap.
        let (lifetime, overflowA) = ttl.multipliedReportingOverflow(by: 1000)
        let (expires, overflowB) = now.addingReportingOverflow(lifetime)
        guard !overflowA, !overflowB else { throw ServiceError(.outOfRange, "ttl_seconds is out of range") }
        let contentType =
            request.contentType.isEmpty
            ? (request.kind == .secure ? "text/plain; charset=utf-8" : "application/octet-stream")
            : request.contentType
        return Admitted(createdAt: now, expiresAt: expires, contentType: contentType)
    }

    static func notFound(_ id: Int64) -> ServiceError { .notFound("notification \(id) not found") }
}

/// Rich and secure content in SQLite.
///
/// Ids come from an AUTOINCREMENT key: allocated atomically by SQLite (the tutorial used
/// `list.Count`, a race) and never reused.
public final class SQLitePayloadStore: PayloadStore {
    private let db: any DatabaseWriter
    public let rules: PayloadRules

    public init(
        db: any DatabaseWriter, defaultTTL: Duration = .seconds(7 * 24 * 3600), maxContentBytes: Int = 5 << 20,
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) throws {
        self.db = db
        self.rules = PayloadRules(defaultTTL: defaultTTL, maxContentBytes: maxContentBytes, now: now)
        try HeraldDatabase.migrate(Self.migrator, db)
    }

    // The protocol's requirements run the synchronous GRDB calls below on the caller's executor
    // (in an async function GRDB's async overloads, which hop to its queue, would win).
    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 { try deleteEverythingNow() }
    nonisolated(nonsending) public func purgeExpired() async throws -> Int { try purgeExpiredNow() }
    nonisolated(nonsending) public func eraseUser(_ user: String) async throws -> (removed: Int64, redacted: Int64) {
        try eraseNow(user)
    }

    nonisolated(nonsending) public func exportPage(user: String, after: Int64, limit: Int) async throws
        -> [StoredPayload]
    {
        try exportNow(user: user, after: after, limit: limit)
    }

    private func exportNow(user: String, after: Int64, limit: Int) throws -> [StoredPayload] {
        try db.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, recipient, sender, kind, content, content_type, message, rich_type, read, created_at, expires_at
                    FROM payload WHERE (recipient = ? OR sender = ?) AND id > ? ORDER BY id LIMIT ?
                    """,
                arguments: [user, user, after, limit]
            ).map {
                StoredPayload(
                    id: $0["id"], recipient: $0["recipient"], sender: $0["sender"],
                    kind: PayloadKind(rawValue: $0["kind"]), content: [UInt8]($0["content"] as Data),
                    contentType: $0["content_type"], message: $0["message"], richType: $0["rich_type"],
                    read: $0["read"], createdAt: $0["created_at"], expiresAt: $0["expires_at"])
            }
        }
    }

    private func eraseNow(_ user: String) throws -> (removed: Int64, redacted: Int64) {
        // secure_delete (set on every connection) overwrites what is deleted; the checkpoint
        // takes the copies out of the WAL too, as purgeExpired does.
        let erased = try db.write { db in
            try db.execute(sql: "DELETE FROM payload WHERE recipient = ?", arguments: [user])
            let removed = Int64(db.changesCount)
            try db.execute(sql: "UPDATE payload SET sender = '' WHERE sender = ?", arguments: [user])
            return (removed, Int64(db.changesCount))
        }
        if erased.0 + erased.1 > 0, let pool = db as? DatabasePool {
            try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
        }
        return erased
    }
    nonisolated(nonsending) public func store(_ request: StorePayloadRequest) async throws -> StorePayloadResponse {
        try storeNow(request)
    }
    nonisolated(nonsending) public func delete(id: Int64, recipient: String) async throws {
        try deleteNow(id: id, recipient: recipient)
    }
    nonisolated(nonsending) public func read(id: Int64, requester: String) async throws -> FetchPayloadResponse {
        try readNow(id: id, requester: requester)
    }
    nonisolated(nonsending) public func markRead(id: Int64) async throws { try markReadNow(id: id) }

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

    private func deleteEverythingNow() throws -> Int64 {
        try TestMode.deleteAll(["payload"], in: db)
    }

    /// The database is opened with `secure_delete` (see ``PayloadServer``), so SQLite overwrites the
    /// freed pages with zeros, and the WAL is checkpointed and truncated afterwards: expired content
    /// leaves no copy in either file.
    private func purgeExpiredNow() throws -> Int {
        let purged = try db.write { db in
            try db.execute(sql: "DELETE FROM payload WHERE expires_at <= ?", arguments: [rules.now()])
            return db.changesCount
        }
        if purged > 0, let pool = db as? DatabasePool {
            try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
        }
        return purged
    }

    private func storeNow(_ request: StorePayloadRequest) throws -> StorePayloadResponse {
        let admitted = try rules.admit(request)
        let id = try db.write { db in
            try db.execute(
                sql: """
                    INSERT INTO payload (recipient, sender, kind, content, content_type, message, rich_type,
                                         created_at, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    request.recipient, request.sender, request.kind.rawValue, Data(request.content),
                    admitted.contentType,
                    request.message, request.richType, admitted.createdAt, admitted.expiresAt,
                ])
            return db.lastInsertedRowID
        }
        return StorePayloadResponse(id: id, expiresAtUnixMs: admitted.expiresAt)
    }

    /// `secure_delete` zeroes the freed pages; the WAL copy goes at the next checkpoint, which the
    /// purge truncates.
    private func deleteNow(id: Int64, recipient: String) throws {
        let deleted = try db.write { db in
            try db.execute(sql: "DELETE FROM payload WHERE id = ? AND recipient = ?", arguments: [id, recipient])
            return db.changesCount
        }
        guard deleted > 0 else { throw PayloadRules.notFound(id) }
    }

    /// A WAL read: never waits for the writer, so the RPC handler runs it on the event loop, and
    /// leaves the loop for ``markRead(id:)`` when `read` is false.
    private func readNow(id: Int64, requester: String) throws -> FetchPayloadResponse {
        let notFound = PayloadRules.notFound(id)
        guard !requester.isEmpty else { throw notFound }
        // Cached statements: preparing one costs more than running it (GRDB's authorizer sees every
        // column). One SELECT is its own read transaction, so `unsafeRead` spares GRDB's
        // BEGIN/COMMIT (a third of this read's instructions). Columns by position: by name, GRDB
        // lowercases every column name on each lookup.
        let row = try db.unsafeRead { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT kind, content, content_type, message, rich_type, read, created_at FROM payload
                        WHERE id = ? AND recipient = ? AND expires_at > ?
                        """),
                arguments: [id, requester, rules.now()])
        }
        guard let row else { throw notFound }
        let content: Data = row[1]
        return FetchPayloadResponse(
            id: id, kind: PayloadKind(rawValue: row[0]), content: [UInt8](content),
            contentType: row[2], message: row[3], richType: row[4], read: row[5], createdAtUnixMs: row[6])
    }

    private func markReadNow(id: Int64) throws {
        do {
            try db.write { db in
                try db.cachedStatement(sql: "UPDATE payload SET read = 1 WHERE id = ?").execute(arguments: [id])
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
        }
    }
}
