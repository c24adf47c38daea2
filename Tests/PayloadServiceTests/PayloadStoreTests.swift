import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import PayloadService
import Testing

/// Runs `body` with an empty store of `backend`: SQLite in memory, or PostgreSQL in a fresh schema.
func withPayloadStore(
    _ backend: StoreBackend, defaultTTL: Duration = .seconds(7 * 24 * 3600), maxContentBytes: Int = 5 << 20,
    now: @escaping @Sendable () -> Int64 = unixMillis, box: SecretBox? = nil,
    _ body: (PayloadStore) async throws -> Void
) async throws {
    let rules = PayloadRules(defaultTTL: defaultTTL, maxContentBytes: maxContentBytes, now: now)
    try await TestDatabases.withDatabase(backend, service: "payload") { db in
        try await body(PayloadStore(db: db, rules: rules, box: box))
    }
}

@Suite("payload store", .watchedForStalls)
struct PayloadStoreTests {
    @Test(
        "ids are allocated in order, reads are recipient-only and flip the read flag", arguments: StoreBackend.available
    )
    func fetch(_ backend: StoreBackend) async throws {
        try await withPayloadStore(backend) { store in
            let first = try await store.store(
                StorePayloadRequest(recipient: "alice", kind: .secure, content: Array("one".utf8)))
            let second = try await store.store(
                StorePayloadRequest(recipient: "alice", kind: .secure, content: Array("two".utf8)))
            #expect(second.id == first.id + 1)
            await #expect(throws: ServiceError.notFound("notification \(first.id) not found")) {
                try await store.fetch(id: first.id, requester: "bob")
            }
            let once = try await store.fetch(id: first.id, requester: "alice")
            #expect(
                once.content == Array("one".utf8) && once.read == false
                    && once.contentType == "text/plain; charset=utf-8")
            #expect(once.kind == .secure && once.id == first.id)
            #expect(try await store.fetch(id: first.id, requester: "alice").read == true)
            await #expect(throws: ServiceError.self) { try await store.fetch(id: 999, requester: "alice") }
            await #expect(throws: ServiceError.self) { try await store.fetch(id: first.id, requester: "") }
        }
    }

    @Test(
        "with a keyring, content is sealed in the table, read back whole, re-sealed after a rotation; rows from before are sealed too",
        arguments: StoreBackend.available)
    func sealed(_ backend: StoreBackend) async throws {
        try await withTemporaryFolder("herald-keys") { folder in
            let box = SecretBox(keyring: try Keyring(folder: folder), purpose: "secure and rich content")
            let rules = PayloadRules()
            try await TestDatabases.withDatabase(backend, service: "payload") { db in
                // A row stored before encryption was turned on.
                let plain = try await PayloadStore(db: db, rules: rules)
                let before = try await plain.store(
                    StorePayloadRequest(recipient: "alice", kind: .secure, content: Array("old secret".utf8)))
                let store = try await PayloadStore(db: db, rules: rules, box: box)
                let stored = try await store.store(
                    StorePayloadRequest(recipient: "alice", kind: .secure, content: Array("the secret".utf8)))
                let raw = try await db.query("SELECT content FROM payload ORDER BY id") { row -> [UInt8] in try row[0] }
                #expect(raw.first == Array("old secret".utf8))
                #expect(!String(decoding: raw.last ?? [], as: UTF8.self).contains("the secret"))
                #expect(try await store.fetch(id: stored.id, requester: "alice").content == Array("the secret".utf8))
                #expect(try await store.fetch(id: before.id, requester: "alice").content == Array("old secret".utf8))
                #expect(try await store.rewrapAll() == 1, "the row from before is sealed")
                try Keyring.addCurrentKey(folder: folder, name: "k2")
                try await box.keyring.reload()
                #expect(try await store.rewrapAll() == 2)
                #expect(try await store.rewrapAll() == 0)
                let now = try await db.query("SELECT content FROM payload ORDER BY id") { row -> [UInt8] in try row[0] }
                #expect(now.allSatisfy { box.isCurrent($0) })
                #expect(try await store.fetch(id: before.id, requester: "alice").content == Array("old secret".utf8))
                let page = try await store.exportPage(user: "alice", after: 0, limit: 10)
                #expect(page.map(\.content) == [Array("old secret".utf8), Array("the secret".utf8)])
            }
        }
    }

    @Test("rich content keeps its bytes, type, message and rich type", arguments: StoreBackend.available)
    func richRoundTrip(_ backend: StoreBackend) async throws {
        try await withPayloadStore(backend) { store in
            let bytes = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let stored = try await store.store(
                StorePayloadRequest(
                    recipient: "alice", kind: .rich, content: bytes, contentType: "image/png", message: "look",
                    richType: "img",
                    sender: "bob"))
            let answer = try await store.fetch(id: stored.id, requester: "alice")
            #expect(answer.content == bytes && answer.contentType == "image/png" && answer.message == "look")
            #expect(answer.richType == "img" && answer.kind == .rich && answer.createdAtUnixMs > 0)
        }
    }

    @Test("expired content is not found", arguments: StoreBackend.available)
    func expiry(_ backend: StoreBackend) async throws {
        let clock = ManualClock()
        try await withPayloadStore(backend, defaultTTL: .seconds(60), now: clock.function) { store in
            let stored = try await store.store(StorePayloadRequest(recipient: "alice", kind: .secure, content: [1]))
            clock.advance(seconds: 59)
            _ = try await store.fetch(id: stored.id, requester: "alice")
            clock.advance(seconds: 1)
            await #expect(throws: ServiceError.self) { try await store.fetch(id: stored.id, requester: "alice") }
        }
    }

    @Test("purging deletes expired content only", arguments: StoreBackend.available)
    func purgeCounts(_ backend: StoreBackend) async throws {
        let clock = ManualClock()
        try await withPayloadStore(backend, defaultTTL: .seconds(60), now: clock.function) { store in
            for _ in 0..<3 {
                _ = try await store.store(StorePayloadRequest(recipient: "alice", kind: .rich, content: [9]))
            }
            let kept = try await store.store(
                StorePayloadRequest(recipient: "alice", kind: .rich, content: [1], ttlSeconds: 3600))
            #expect(try await store.purgeExpired() == 0)
            clock.advance(seconds: 61)
            #expect(try await store.purgeExpired() == 3)
            #expect(try await store.purgeExpired() == 0)
            #expect(try await store.fetch(id: kept.id, requester: "alice").content == [1])
            #expect(try await store.deleteEverything() == 1)
        }
    }

    @Test("SQLite: purging leaves no copy of the content's bytes in the files")
    func purge() async throws {
        let clock = ManualClock()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("herald-purge-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("payload.sqlite").path
        let pool = try DatabasePool(path: path, configuration: HeraldDatabase.secureDeleteConfiguration)
        let store = try await PayloadStore(
            db: SQLiteDatabase(pool), rules: PayloadRules(defaultTTL: .seconds(60), now: clock.function))
        let marker = Array("MARKER-\(UUID().uuidString)".utf8)
        let doomed = try await store.store(
            StorePayloadRequest(recipient: "alice", kind: .rich, content: marker + Array(repeating: 7, count: 10_000)))
        let kept = try await store.store(
            StorePayloadRequest(recipient: "alice", kind: .rich, content: [1], ttlSeconds: 3600))
        #expect(try await store.purgeExpired() == 0)
        clock.advance(seconds: 61)
        #expect(try await store.purgeExpired() == 1)
        #expect(try await store.purgeExpired() == 0)
        await #expect(throws: ServiceError.self) { try await store.fetch(id: doomed.id, requester: "alice") }
        #expect(try await store.fetch(id: kept.id, requester: "alice").content == [1])
        for file in [path, path + "-wal"] {
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: file))) ?? Data()
            #expect(bytes.firstRange(of: Data(marker)) == nil, "\(file) still holds the purged content")
        }
    }

    @Test("bad requests are refused", arguments: StoreBackend.available)
    func validation(_ backend: StoreBackend) async throws {
        try await withPayloadStore(backend, maxContentBytes: 4) { store in
            await #expect(throws: ServiceError.self) { try await store.store(StorePayloadRequest(kind: .secure)) }
            await #expect(throws: ServiceError.self) { try await store.store(StorePayloadRequest(recipient: "a")) }
            await #expect {
                try await store.store(StorePayloadRequest(recipient: "a", kind: .rich, content: [1, 2, 3, 4, 5]))
            } throws: { ($0 as? ServiceError)?.code == .resourceExhausted }
        }
    }
}
