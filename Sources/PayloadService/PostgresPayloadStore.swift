import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldService
import NIOCore
import PostgresNIO

/// Rich and secure content in PostgreSQL, for replicas of herald-payload that share one database.
///
/// Ids come from an identity column (a sequence): atomic across replicas and never reused, like
/// SQLite's AUTOINCREMENT. What SQLite's `secure_delete` does for the file is the database's job
/// here: deleted rows linger until VACUUM reclaims them, so keep TTLs short and the storage encrypted.
public final class PostgresPayloadStore: PayloadStore {
    private let db: HeraldPostgres
    public let rules: PayloadRules

    public init(db: HeraldPostgres, rules: PayloadRules = PayloadRules()) async throws {
        self.db = db
        self.rules = rules
        try await db.migrate(Self.migrations)
    }

    /// The schema's history; names are never changed once released.
    public static let migrations: [PostgresMigration] = [
        .heartbeat,
        PostgresMigration(
            "payload-v1",
            [
                """
                CREATE TABLE payload (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    recipient TEXT NOT NULL,
                    sender TEXT NOT NULL DEFAULT '',
                    kind INTEGER NOT NULL,
                    content BYTEA NOT NULL,
                    content_type TEXT NOT NULL,
                    message TEXT NOT NULL DEFAULT '',
                    rich_type TEXT NOT NULL DEFAULT '',
                    read BOOLEAN NOT NULL DEFAULT false,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX payload_expires ON payload (expires_at)",
            ]),
    ]

    nonisolated(nonsending) public func store(_ request: StorePayloadRequest) async throws -> StorePayloadResponse {
        let admitted = try rules.admit(request)
        let content = ByteBuffer(bytes: request.content)
        let kind = Int32(request.kind.rawValue)
        let rows = try await db.query(
            """
            INSERT INTO payload (recipient, sender, kind, content, content_type, message, rich_type, created_at, expires_at)
            VALUES (\(request.recipient), \(request.sender), \(kind), \(content), \(admitted.contentType), \(request.message),
                    \(request.richType), \(admitted.createdAt), \(admitted.expiresAt))
            RETURNING id
            """)
        for try await id in rows.decode(Int64.self) {
            return StorePayloadResponse(id: id, expiresAtUnixMs: admitted.expiresAt)
        }
        throw ServiceError(.internal, "INSERT … RETURNING id returned no row")
    }

    nonisolated(nonsending) public func read(id: Int64, requester: String) async throws -> FetchPayloadResponse {
        guard !requester.isEmpty else { throw PayloadRules.notFound(id) }
        let rows = try await db.execute(ReadPayload(id: id, recipient: requester, now: rules.now()))
        if let (kind, content, type, message, richType, read, createdAt) = rows.first {
            return FetchPayloadResponse(
                id: id, kind: PayloadKind(rawValue: kind), content: Array(buffer: content), contentType: type,
                message: message,
                richType: richType, read: read, createdAtUnixMs: createdAt)
        }
        throw PayloadRules.notFound(id)
    }

    nonisolated(nonsending) public func markRead(id: Int64) async throws {
        do {
            try await db.query("UPDATE payload SET read = true WHERE id = \(id) AND NOT read")
        } catch let error as PSQLError where error.serviceError == .storageFull {
        }
    }

    nonisolated(nonsending) public func delete(id: Int64, recipient: String) async throws {
        let rows = try await db.rows("DELETE FROM payload WHERE id = \(id) AND recipient = \(recipient) RETURNING id")
        guard !rows.isEmpty else { throw PayloadRules.notFound(id) }
    }

    nonisolated(nonsending) public func eraseUser(_ user: String) async throws -> (removed: Int64, redacted: Int64) {
        try await db.transaction { connection in
            let removed = try await connection.query(
                "DELETE FROM payload WHERE recipient = \(user) RETURNING id", logger: db.logger
            ).collect().count
            let redacted = try await connection.query(
                "UPDATE payload SET sender = '' WHERE sender = \(user) RETURNING id", logger: db.logger
            ).collect().count
            return (Int64(removed), Int64(redacted))
        }
    }

    nonisolated(nonsending) public func exportPage(user: String, after: Int64, limit: Int) async throws
        -> [StoredPayload]
    {
        try await db.rows(
            """
            SELECT id, recipient, sender, kind, content, content_type, message, rich_type, read, created_at, expires_at
            FROM payload WHERE (recipient = \(user) OR sender = \(user)) AND id > \(after) ORDER BY id LIMIT \(Int64(limit))
            """
        ).map { row in
            let (id, recipient, sender, kind, content, contentType, message, richType, read, created, expires) =
                try row.decode(
                    (Int64, String, String, Int32, ByteBuffer, String, String, String, Bool, Int64, Int64).self)
            return StoredPayload(
                id: id, recipient: recipient, sender: sender, kind: PayloadKind(rawValue: kind),
                content: Array(content.readableBytesView),
                contentType: contentType, message: message, richType: richType, read: read, createdAt: created,
                expiresAt: expires)
        }
    }

    nonisolated(nonsending) public func purgeExpired() async throws -> Int {
        // In batches, so that a large purge never holds many row locks in one transaction.
        try await db.deleteInBatches(batch: 1000) {
            """
            DELETE FROM payload WHERE id IN (
                SELECT id FROM payload WHERE expires_at <= \(rules.now()) LIMIT 1000 FOR UPDATE SKIP LOCKED)
            RETURNING id
            """
        }
    }

    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 {
        try await db.deleteAll(["payload"])
    }
}

/// FetchPayload's read, prepared once per connection.
struct ReadPayload: PostgresPreparedStatement {
    static let sql = """
        SELECT kind, content, content_type, message, rich_type, read, created_at FROM payload
        WHERE id = $1 AND recipient = $2 AND expires_at > $3
        """
    typealias Row = (Int32, ByteBuffer, String, String, String, Bool, Int64)
    var id: Int64
    var recipient: String
    var now: Int64

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(id)
        bindings.append(recipient)
        bindings.append(now)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}
