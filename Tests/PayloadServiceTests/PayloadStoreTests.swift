import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import PayloadService
import Testing

@Suite("payload store")
struct PayloadStoreTests {
    final class Clock: @unchecked Sendable {
        var now: Int64 = 1_000_000
    }

    @Test("ids are allocated in order, reads are recipient-only and flip the read flag")
    func fetch() throws {
        let store = try PayloadStore(db: DatabaseQueue())
        let first = try store.store(StorePayloadRequest(recipient: "alice", kind: .secure, content: Array("one".utf8)))
        let second = try store.store(StorePayloadRequest(recipient: "alice", kind: .secure, content: Array("two".utf8)))
        #expect(second.id == first.id + 1)
        #expect(throws: ServiceError.notFound("notification \(first.id) not found")) {
            try store.fetch(id: first.id, requester: "bob")
        }
        let once = try store.fetch(id: first.id, requester: "alice")
        #expect(once.content == Array("one".utf8) && once.read == false && once.contentType == "text/plain; charset=utf-8")
        #expect(try store.fetch(id: first.id, requester: "alice").read == true)
        #expect(throws: ServiceError.self) { try store.fetch(id: 999, requester: "alice") }
    }

    @Test("expired content is not found")
    func expiry() throws {
        let clock = Clock()
        let store = try PayloadStore(db: DatabaseQueue(), defaultTTL: .seconds(60), now: { clock.now })
        let stored = try store.store(StorePayloadRequest(recipient: "alice", kind: .secure, content: [1]))
        clock.now += 59_000
        _ = try store.fetch(id: stored.id, requester: "alice")
        clock.now += 1_000
        #expect(throws: ServiceError.self) { try store.fetch(id: stored.id, requester: "alice") }
    }

    @Test("purging deletes expired content and leaves no copy of its bytes in the files")
    func purge() throws {
        let clock = Clock()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("herald-purge-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("payload.sqlite").path
        let pool = try DatabasePool(path: path, configuration: HeraldDatabase.secureDeleteConfiguration)
        let store = try PayloadStore(db: pool, defaultTTL: .seconds(60), now: { clock.now })
        let marker = Array("MARKER-\(UUID().uuidString)".utf8)
        let doomed = try store.store(
            StorePayloadRequest(recipient: "alice", kind: .rich, content: marker + Array(repeating: 7, count: 10_000)))
        let kept = try store.store(StorePayloadRequest(recipient: "alice", kind: .rich, content: [1], ttlSeconds: 3600))
        #expect(try store.purgeExpired() == 0)
        clock.now += 61_000
        #expect(try store.purgeExpired() == 1)
        #expect(try store.purgeExpired() == 0)
        #expect(throws: ServiceError.self) { try store.fetch(id: doomed.id, requester: "alice") }
        #expect(try store.fetch(id: kept.id, requester: "alice").content == [1])
        for file in [path, path + "-wal"] {
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: file))) ?? Data()
            #expect(bytes.firstRange(of: Data(marker)) == nil, "\(file) still holds the purged content")
        }
    }

    @Test("bad requests are refused")
    func validation() throws {
        let store = try PayloadStore(db: DatabaseQueue(), maxContentBytes: 4)
        #expect(throws: ServiceError.self) { try store.store(StorePayloadRequest(kind: .secure)) }
        #expect(throws: ServiceError.self) { try store.store(StorePayloadRequest(recipient: "a")) }
        #expect {
            try store.store(StorePayloadRequest(recipient: "a", kind: .rich, content: [1, 2, 3, 4, 5]))
        } throws: { ($0 as? ServiceError)?.code == .resourceExhausted }
    }
}
