import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldSQL
import HeraldService

/// Rich and secure content, in whichever database `database-url` names: SQLite (embedded, one
/// process) or PostgreSQL (shared by replicas), through one ``SQLDatabase``. ``PayloadRules``
/// checks each request before anything is written, so a request is refused the same way on either.
///
/// Ids are allocated by the database (AUTOINCREMENT, an identity column): atomically (the tutorial
/// used `list.Count`, a race) and never reused, so an old push can never point at newer content.
/// What SQLite's `secure_delete` (set on the file by ``PayloadServer``) and the log truncation after
/// each delete do for the files is VACUUM's job on PostgreSQL: deleted rows linger until it runs, so
/// keep TTLs short and the storage encrypted there.
public final class PayloadStore: Sendable {
    private let db: any SQLDatabase
    public let rules: PayloadRules
    /// Seals each content (`encryption-keys`); nil: stored as it is.
    private let box: SecretBox?

    public init(db: any SQLDatabase, rules: PayloadRules = PayloadRules(), box: SecretBox? = nil) async throws {
        self.db = db
        self.rules = rules
        self.box = box
        try await db.migrate(Self.schema)
    }

    /// Seals every content not sealed under the keyring's current key (stored before encryption,
    /// or under a key a rotation replaced); answers how many. The scan reads each row's first 12
    /// bytes (the seal's mark and key id), a thousand rows a statement, and the whole content
    /// only of a row it re-wraps: a pass over a table already sealed reads no content.
    public func rewrapAll() async throws -> Int {
        guard let box else { return 0 }
        var after: Int64 = 0
        var rewrapped = 0
        while true {
            let page = try await db.query(
                "SELECT id, substr(content, 1, 12) FROM payload WHERE id > \(after) ORDER BY id LIMIT 1000"
            ) { row -> (Int64, [UInt8]) in (try row[0], try row[1]) }
            guard let last = page.last else { return rewrapped }
            after = last.0
            for (id, head) in page where !box.isCurrent(head: head) {
                guard
                    let content = try await db.queryFirst("SELECT content FROM payload WHERE id = \(id)")
                        .map({ row -> [UInt8] in try row[0] }),
                    let sealed = try box.rewrap(content)
                else { continue }
                // Compared with what was read: a row changed meanwhile is left to that change.
                rewrapped += try await db.execute(
                    "UPDATE payload SET content = \(sealed) WHERE id = \(id) AND content = \(content)")
            }
        }
    }

    /// The schema's history; names are never changed once released.
    public static let schema = SQLSchema([
        SQLMigration(
            postgres: "payload-v1", sqlite: "v1",
            [
                """
                CREATE TABLE payload (
                    id \(.serialKey),
                    recipient TEXT NOT NULL,
                    sender TEXT NOT NULL DEFAULT '',
                    kind INTEGER NOT NULL,
                    content \(.bytes) NOT NULL,
                    content_type TEXT NOT NULL,
                    message TEXT NOT NULL DEFAULT '',
                    rich_type TEXT NOT NULL DEFAULT '',
                    read \(.bool) NOT NULL DEFAULT \(.false),
                    created_at \(.int64) NOT NULL,
                    expires_at \(.int64) NOT NULL
                )
                """
            ],
            // SQLite's first release had no index on expiry; the purge scans its one file.
            postgresOnly: ["CREATE INDEX payload_expires ON payload (expires_at)"])
    ])

    public var maxContentBytes: Int { rules.maxContentBytes }

    /// Stores content; answers its id.
    nonisolated(nonsending) public func store(_ request: StorePayloadRequest) async throws -> StorePayloadResponse {
        let admitted = try rules.admit(request)
        let content = try sealed(request.content)
        let row = try await db.executeReturning(
            """
            INSERT INTO payload (recipient, sender, kind, content, content_type, message, rich_type, created_at, expires_at)
            VALUES (\(request.recipient), \(request.sender), \(Int64(request.kind.rawValue)), \(content),
                    \(admitted.contentType), \(request.message), \(request.richType), \(admitted.createdAt),
                    \(admitted.expiresAt))
            RETURNING id
            """
        ).first
        guard let row else { throw ServiceError(.internal, "INSERT … RETURNING id returned no row") }
        return StorePayloadResponse(id: try row[0], expiresAtUnixMs: admitted.expiresAt)
    }

    func sealed(_ content: [UInt8]) throws -> [UInt8] { try box?.seal(content) ?? content }
    func opened(_ stored: [UInt8]) throws -> [UInt8] { try box?.open(stored) ?? stored }

    /// The content, for its recipient only and before it expires; `read` is the flag as it was.
    ///
    /// On SQLite a WAL read: it never waits for the writer, so the RPC handler runs it on the event
    /// loop, and leaves the loop for ``markRead(id:)`` when `read` is false.
    nonisolated(nonsending) public func read(id: Int64, requester: String) async throws -> FetchPayloadResponse {
        guard !requester.isEmpty else { throw PayloadRules.notFound(id) }
        let row = try await db.queryFirst(
            """
            SELECT kind, content, content_type, message, rich_type, read, created_at FROM payload
            WHERE id = \(id) AND recipient = \(requester) AND expires_at > \(rules.now())
            """)
        guard let row else { throw PayloadRules.notFound(id) }
        return FetchPayloadResponse(
            id: id, kind: PayloadKind(rawValue: try row[0]), content: try opened(row[1]), contentType: try row[2],
            message: try row[3], richType: try row[4], read: try row[5], createdAtUnixMs: try row[6])
    }

    /// Sets the read flag after a first read. A full disk must not stop the recipient from
    /// reading: the flag is then set on a later read.
    nonisolated(nonsending) public func markRead(id: Int64) async throws {
        do {
            try await db.execute("UPDATE payload SET read = \(true) WHERE id = \(id) AND read = \(false)")
        } catch let error as any ServiceErrorConvertible where error.serviceError?.isStorageFull == true {
        }
    }

    /// Deletes one notification's content for good; NOT_FOUND unless `recipient` is its recipient.
    ///
    /// The compensating step of a refused send: the edge stores, then sends, and deletes when the
    /// send is refused.
    nonisolated(nonsending) public func delete(id: Int64, recipient: String) async throws {
        let deleted = try await db.execute("DELETE FROM payload WHERE id = \(id) AND recipient = \(recipient)")
        // SQLite's `secure_delete` zeroes the freed pages; the WAL's copy goes at the next purge's truncation.
        guard deleted > 0 else { throw PayloadRules.notFound(id) }
    }

    /// Erase: deletes every content addressed to `user`; blanks the sender of content `user` sent
    /// (it stays its recipients'). Idempotent. A scan of the table: erases are rare, and an index
    /// on sender would cost every store.
    nonisolated(nonsending) public func eraseUser(_ user: String) async throws -> (removed: Int64, redacted: Int64) {
        let erased = try await db.transaction { session in
            let removed = try await session.execute("DELETE FROM payload WHERE recipient = \(user)")
            let redacted = try await session.execute("UPDATE payload SET sender = '' WHERE sender = \(user)")
            return (Int64(removed), Int64(redacted))
        }
        if erased.0 + erased.1 > 0 { try await db.truncateLog() }
        return erased
    }

    /// Export: content addressed to or sent by `user`, by id after `after`.
    nonisolated(nonsending) public func exportPage(user: String, after: Int64, limit: Int) async throws
        -> [StoredPayload]
    {
        try await db.query(
            """
            SELECT id, recipient, sender, kind, content, content_type, message, rich_type, read, created_at, expires_at
            FROM payload WHERE (recipient = \(user) OR sender = \(user)) AND id > \(after) ORDER BY id LIMIT \(limit)
            """
        ) { row in
            StoredPayload(
                id: try row[0], recipient: try row[1], sender: try row[2], kind: PayloadKind(rawValue: try row[3]),
                content: try opened(row[4]), contentType: try row[5], message: try row[6], richType: try row[7],
                read: try row[8], createdAt: try row[9], expiresAt: try row[10])
        }
    }

    /// Deletes expired content, a thousand rows a statement; answers how many were removed. It is
    /// 404 from the moment it expires either way.
    nonisolated(nonsending) public func purgeExpired() async throws -> Int {
        let now = rules.now()
        let purged = try await db.deleteInBatches(batch: 1000) {
            """
            DELETE FROM payload WHERE id IN (
                SELECT id FROM payload WHERE expires_at <= \(now) LIMIT 1000 \(.skipLocked))
            """
        }
        if purged > 0 { try await db.truncateLog() }
        return purged
    }

    /// Deletes all content (ResetForTests).
    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 {
        try await db.deleteAll(["payload"])
    }

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
