import AuthService
import GRDB
import HeraldModel
import HeraldProto
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Testing

/// The audit trail's store and chain: records numbered without a gap, each hashing the one before,
/// appends racing on one head all stored in one line, reads by scope, and the verifier finding
/// what was changed or taken out.
@Suite("audit trail store", .watchedForStalls)
struct AuditStoreTests {
    static func store() async throws -> (AuditStore, SQLiteDatabase) {
        let db = try SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration))
        return (try await AuditStore(db: db), db)
    }

    static func change(_ n: Int, hubID: String = "h1") -> AppendAuditRequest {
        AppendAuditRequest(
            actor: "user:admin", action: "key.set", hub: "app1", hubID: hubID, target: "k\(n)",
            clientAddress: "192.0.2.1", requestID: "r\(n)", status: 201, detail: "rights: Send")
    }

    static func all(_ store: AuditStore, hubID: String = "") async throws -> [AuditRecord] {
        var records: [AuditRecord] = []
        var after: Int64 = 0
        while true {
            let page = try await store.list(
                ListAuditRequest(scope: hubID.isEmpty ? .all : .hub, hubID: hubID, afterSeq: after, limit: 7))
            records += page.records
            guard page.nextAfterSeq > 0 else { return records }
            after = page.nextAfterSeq
        }
    }

    @Test("100 appends at once make one chain 1…100 that verifies; a page is at most its limit")
    func concurrentAppends() async throws {
        let (store, _) = try await Self.store()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for n in 0..<100 {
                group.addTask {
                    _ = try await store.append(Self.change(n, hubID: n.isMultiple(of: 2) ? "h1" : "h2"))
                }
            }
            try await group.waitForAll()
        }
        let records = try await Self.all(store)
        #expect(records.map(\.seq) == Array(1...100))
        var verifier = AuditChain.Verifier()
        for record in records { verifier.check(record) }
        #expect(verifier.breaks == [] && verifier.checked == 100)
        #expect(records.first?.prevHash == AuditChain.genesis)
        let head = try await store.list(ListAuditRequest(scope: .all, limit: 1))
        #expect(head.headSeq == 100 && head.headHash == records.last?.hash && head.records.count == 1)
        #expect(try await Self.all(store, hubID: "h2").count == 50)
    }

    @Test("the verifier names the record altered, the one after a gap, and a broken link")
    func verifierFindsBreaks() async throws {
        let (store, _) = try await Self.store()
        for n in 0..<5 { _ = try await store.append(Self.change(n)) }
        let records = try await Self.all(store)
        func breaks(_ records: [AuditRecord]) -> [AuditChain.Break] {
            var verifier = AuditChain.Verifier()
            for record in records { verifier.check(record) }
            return verifier.breaks
        }
        var altered = records
        altered[2].status = 200
        #expect(breaks(altered).map(\.seq) == [3])
        #expect(breaks(altered).first?.reason.hasPrefix("altered") == true)
        var gap = records
        gap.remove(at: 1)
        #expect(breaks(gap).map(\.seq) == [3])
        #expect(breaks(gap).first?.reason.contains("1 record(s) missing") == true)
        // Rewritten and re-hashed: its own hash holds, the next record's link does not.
        var rehashed = records
        rehashed[1].actor = "user:mallory"
        rehashed[1].hash = AuditChain.hash(rehashed[1])
        #expect(breaks(rehashed).map(\.seq) == [3])
        #expect(breaks(records) == [])
        // Fields cannot trade bytes: "ab"+"c" and "a"+"bc" hash apart.
        var one = records[0]
        var two = records[0]
        (one.actor, one.action) = ("ab", "c")
        (two.actor, two.action) = ("a", "bc")
        #expect(AuditChain.hash(one) != AuditChain.hash(two))
    }

    @Test("refused: empty actor or action, fields over their bounds, reads without a scope or out of range")
    func refusals() async throws {
        let (store, _) = try await Self.store()
        var bad: [AppendAuditRequest] = []
        var empty = Self.change(1)
        empty.actor = ""
        bad.append(empty)
        var noAction = Self.change(1)
        noAction.action = ""
        bad.append(noAction)
        var long = Self.change(1)
        long.target = String(repeating: "é", count: 129)
        bad.append(long)
        var longID = Self.change(1)
        longID.requestID = String(repeating: "r", count: 65)
        bad.append(longID)
        for request in bad {
            await #expect(throws: ServiceError.self) { try await store.append(request) }
        }
        for request in [
            ListAuditRequest(scope: .unspecified), ListAuditRequest(scope: .handle, hubID: "h1"),
            ListAuditRequest(scope: .hub), ListAuditRequest(scope: .all, hubID: "h1"),
            ListAuditRequest(scope: .all, limit: 1001), ListAuditRequest(scope: .all, afterSeq: -1),
            ListAuditRequest(scope: .all, limit: -1),
        ] {
            await #expect(throws: ServiceError.self, "\(request)") { try await store.list(request) }
        }
        #expect(try await store.list(ListAuditRequest(scope: .all)).records.isEmpty)
    }
}
