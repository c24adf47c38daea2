import HeraldModel
public import HeraldProto
public import HeraldSQL
import HeraldService

/// The audit trail (``AuditChain``), in herald-auth's database beside the hubs and accounts.
///
/// Append-only: this type inserts and reads, and nothing else writes the table but
/// ``deleteEverything()`` (ResetForTests). A record's seq is the head's plus one and is the
/// table's primary key, so two appends that read the same head (replicas on PostgreSQL) cannot
/// both be stored: the second inserts nothing and is made again on the new head. The chain so
/// stays one line however many replicas append.
public final class AuditStore: Sendable {
    private let db: any SQLDatabase
    private let now: @Sendable () -> Int64

    /// Appends racing on one head try again this many times before UNAVAILABLE.
    static let attempts = 50

    public init(db: any SQLDatabase, now: @escaping @Sendable () -> Int64 = unixMillis) async throws {
        self.db = db
        self.now = now
        try await db.migrate(AuthSchema.schema)
    }

    /// Stores `request` as the next record and answers it with its seq, time and hashes.
    nonisolated(nonsending) public func append(_ request: AppendAuditRequest) async throws -> AuditRecord {
        try AuditChain.validate(request)
        for _ in 0..<Self.attempts {
            let stored = try await db.transaction { session -> AuditRecord? in
                let head = try await session.queryFirst("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
                var record = AuditRecord(
                    seq: (try head.map { try $0[0] as Int64 } ?? 0) + 1, atUnixMs: self.now(), actor: request.actor,
                    action: request.action, hub: request.hub, hubID: request.hubID, target: request.target,
                    clientAddress: request.clientAddress, requestID: request.requestID, status: request.status,
                    detail: request.detail, prevHash: try head.map { try $0[1] as String } ?? AuditChain.genesis)
                record.hash = AuditChain.hash(record)
                let inserted = try await session.executeReturning(
                    """
                    INSERT INTO audit (seq, at, actor, action, hub, hub_id, target, client_address, request_id,
                                       status, detail, prev_hash, hash)
                    VALUES (\(record.seq), \(record.atUnixMs), \(record.actor), \(record.action), \(record.hub),
                            \(record.hubID), \(record.target), \(record.clientAddress), \(record.requestID),
                            \(Int64(record.status)), \(record.detail), \(record.prevHash), \(record.hash))
                    ON CONFLICT (seq) DO NOTHING RETURNING seq
                    """)
                return inserted.isEmpty ? nil : record
            }
            if let stored { return stored }
        }
        throw ServiceError(.unavailable, "the audit trail's head moved \(Self.attempts) times in a row; try again")
    }

    /// A page of records oldest first (``ListAuditRequest``), with the trail's head.
    nonisolated(nonsending) public func list(_ request: ListAuditRequest) async throws -> ListAuditResponse {
        switch request.scope {
        case .hub:
            guard !request.hubID.isEmpty else {
                throw ServiceError.invalidArgument("READ_SCOPE_HUB reads one hub's records: hub_id is empty")
            }
        case .all:
            guard request.hubID.isEmpty else {
                throw ServiceError.invalidArgument("READ_SCOPE_ALL reads every record: leave hub_id empty")
            }
        default:
            throw ServiceError(
                .permissionDenied, "ListAudit reads a hub's or every record: the request needs READ_SCOPE_HUB or _ALL")
        }
        guard (0...1000).contains(request.limit), request.afterSeq >= 0 else {
            throw ServiceError.invalidArgument("limit must be 1 to 1000 (0: 100) and after_seq not negative")
        }
        let limit = Int64(request.limit == 0 ? 100 : request.limit)
        let columns =
            "seq, at, actor, action, hub, hub_id, target, client_address, request_id, status, detail, prev_hash, hash"
        // One more than asked: whether there is a next page.
        let rows =
            request.hubID.isEmpty
            ? try await db.query(
                "SELECT \(raw: columns) FROM audit WHERE seq > \(request.afterSeq) ORDER BY seq LIMIT \(limit + 1)")
            : try await db.query(
                """
                SELECT \(raw: columns) FROM audit WHERE hub_id = \(request.hubID) AND seq > \(request.afterSeq)
                ORDER BY seq LIMIT \(limit + 1)
                """)
        var records: [AuditRecord] = []
        for row in rows.prefix(Int(limit)) {
            records.append(
                AuditRecord(
                    seq: try row[0], atUnixMs: try row[1], actor: try row[2], action: try row[3], hub: try row[4],
                    hubID: try row[5], target: try row[6], clientAddress: try row[7], requestID: try row[8],
                    status: Int32(clamping: try row[9] as Int64), detail: try row[10], prevHash: try row[11],
                    hash: try row[12]))
        }
        let head = try await db.queryFirst("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
        return ListAuditResponse(
            records: records, nextAfterSeq: rows.count > records.count ? records.last?.seq ?? 0 : 0,
            headSeq: try head.map { try $0[0] } ?? 0, headHash: try head.map { try $0[1] } ?? AuditChain.genesis)
    }

    /// ResetForTests: every record.
    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 {
        try await db.deleteAll(["audit"])
    }
}
