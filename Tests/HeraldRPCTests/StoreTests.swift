import DispatchService
import Foundation
import GRDB
import HeraldProto
import HeraldRPC
import HeraldModel
import HeraldService
import PayloadService
import RegistrationService
import Testing

@Suite("registration store")
struct RegistrationStoreTests {
    let token = String(repeating: "ab", count: 32)

    @Test("POST reuses the owner's registration for a handle and deletes its duplicates")
    func createID() throws {
        let store = try RegistrationStore(db: DatabaseQueue())
        let first = try store.createID(owner: "alice", handle: "")
        let second = try store.createID(owner: "alice", handle: "")
        #expect(first != second)
        _ = try store.upsert(owner: "alice", id: first, platform: .apns, handle: token, tags: [])
        _ = try store.upsert(owner: "alice", id: second, platform: .apns, handle: token, tags: [])
        #expect(try store.createID(owner: "alice", handle: token) == first)
        #expect(try store.list(owner: "alice").map(\.registrationID) == [first])
        // Another user with the same handle gets an id of their own: look-ups are scoped.
        #expect(try store.createID(owner: "bob", handle: token) != first)
    }

    @Test("only the owner can update or delete a registration")
    func ownerScoping() throws {
        let store = try RegistrationStore(db: DatabaseQueue())
        let id = try store.createID(owner: "alice", handle: "")
        #expect(throws: ServiceError.notFound("registration \(id) not found")) {
            try store.upsert(owner: "bob", id: id, platform: .apns, handle: token, tags: [])
        }
        #expect(throws: ServiceError.notFound("registration \(id) not found")) { try store.delete(owner: "bob", id: id) }
        let stored = try store.upsert(owner: "alice", id: id, platform: .apns, handle: token, tags: ["news"])
        #expect(stored.tags == ["news", "username:alice"])
        try store.delete(owner: "alice", id: id)
        #expect(throws: ServiceError.self) { try store.upsert(owner: "alice", id: id, platform: .apns, handle: token, tags: []) }
    }

    @Test("an id never PUT expires: its PUT is refused and it is purged")
    func pendingExpiry() throws {
        let clock = ManualClock()
        let store = try RegistrationStore(db: DatabaseQueue(), pendingTTLSeconds: 60, now: clock.function)
        let used = try store.createID(owner: "alice", handle: "")
        _ = try store.upsert(owner: "alice", id: used, platform: .fcm, handle: "t", tags: [])
        let late = try store.createID(owner: "alice", handle: "")
        clock.advance(seconds: 60)
        #expect(throws: ServiceError.notFound("registration \(late) not found")) {
            try store.upsert(owner: "alice", id: late, platform: .fcm, handle: "t", tags: [])
        }
        #expect(try store.purgePending() == 1)
        // A completed registration does not expire, and can be updated any time.
        _ = try store.upsert(owner: "alice", id: used, platform: .fcm, handle: "u", tags: [])
        #expect(try store.list(owner: "alice").map(\.registrationID) == [used])
    }

    @Test("audience pages by id over complete registrations carrying the tag")
    func audience() throws {
        let store = try RegistrationStore(db: DatabaseQueue())
        for i in 0..<1200 {
            let id = try store.createID(owner: "u\(i)", handle: "")
            _ = try store.upsert(owner: "u\(i)", id: id, platform: i % 2 == 0 ? .apns : .fcm, handle: token, tags: ["all"])
        }
        _ = try store.createID(owner: "pending", handle: "")  // never PUT: not part of any audience
        var after = ""
        var seen: [String] = []
        while case let page = try store.audience(tag: "all", platform: .unspecified, after: after, limit: 500), !page.isEmpty {
            seen += page.map(\.registrationID)
            after = page.last!.registrationID
        }
        #expect(seen.count == 1200)
        #expect(seen == seen.sorted())
        #expect(try store.audience(tag: "all", platform: .fcm, after: "", limit: 2000).count == 600)
        #expect(try store.audience(tag: "username:u3", platform: .unspecified, after: "", limit: 10).count == 1)
    }

    @Test("tags are validated and reserved prefixes refused")
    func tagRules() throws {
        #expect(try RegistrationRules.validateTags(["a", "b:c", "a"]) == ["a", "b:c"])
        #expect(throws: ServiceError.self) { try RegistrationRules.validateTags(["username:bob"]) }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateTags(["$InstallationId:x"]) }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateTags(["has space"]) }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateTags([String(repeating: "x", count: 121)]) }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateTags((0..<61).map { "t\($0)" }) }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateTags([""]) }
    }

    @Test("handles are validated per platform")
    func handleRules() throws {
        try RegistrationRules.validateHandle(token, platform: .apns)
        try RegistrationRules.validateHandle("fcm:token-1", platform: .fcm)
        try RegistrationRules.validateHandle("https://db5.notify.windows.com/?token=abc", platform: .wns)
        #expect(throws: ServiceError.self) { try RegistrationRules.validateHandle("xyz", platform: .apns) }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateHandle("has space", platform: .fcm) }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateHandle("https://evil.example/x", platform: .wns) }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateHandle(token, platform: .unspecified) }
        // Web Push: the PushSubscription JSON, endpoint on a browser's push service only.
        let key = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
        func subscription(_ endpoint: String, p256dh: String = key, auth: String = "BTBZMqHH6r4Tts7J_aSIgg") -> String {
            #"{"endpoint":"\#(endpoint)","keys":{"p256dh":"\#(p256dh)","auth":"\#(auth)"}}"#
        }
        try RegistrationRules.validateHandle(subscription("https://fcm.googleapis.com/fcm/send/abc"), platform: .browser)
        try RegistrationRules.validateHandle(subscription("https://updates.push.services.mozilla.com/wpush/v2/x"), platform: .browser)
        for bad in [
            subscription("https://169.254.169.254/latest/meta-data"), subscription("http://fcm.googleapis.com/x"),
            subscription("https://fcm.googleapis.com.evil.example/x"), subscription("https://fcm.googleapis.com/x", p256dh: "AAAA"),
            subscription("https://fcm.googleapis.com/x", auth: "AAAA"), "not json",
        ] {
            #expect(throws: ServiceError.self, "\(bad)") { try RegistrationRules.validateHandle(bad, platform: .browser) }
        }
    }
}

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
        let store = try PayloadStore(db: DatabaseQueue(), defaultTTLSeconds: 60, now: { clock.now })
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
        let store = try PayloadStore(db: pool, defaultTTLSeconds: 60, now: { clock.now })
        let marker = Array("MARKER-\(UUID().uuidString)".utf8)
        let doomed = try store.store(StorePayloadRequest(recipient: "alice", kind: .rich, content: marker + Array(repeating: 7, count: 10_000)))
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

@Suite("dispatch rules")
struct RuleTests {
    @Test("APNs background pushes get priority 5; oversized and inconsistent payloads are refused")
    func platformRules() throws {
        let background = try PlatformRules.prepare(NativePayload(platform: .apns, body: [1], pushType: "background"))
        #expect(background.options.priority == 5)
        let alert = try PlatformRules.prepare(NativePayload(platform: .apns, body: [1]))
        #expect(alert.options.pushType == "alert")
        #expect(alert.options.priority == 10)
        let raw = try PlatformRules.prepare(NativePayload(platform: .wns, body: [1], pushType: "wns/raw"))
        #expect(raw.options.contentType == "application/octet-stream")
        // Defaults are resolved once, here: a sender never falls back to its own.
        let web = try PlatformRules.prepare(NativePayload(platform: .browser, body: [1]))
        #expect(WebPushSender.headers(for: web.options) == [Header(name: "urgency", value: "high")])
        let timed = try PlatformRules.prepare(NativePayload(platform: .fcm, body: Array("{}".utf8), ttlSeconds: 60), sentAt: 1_000_500)
        #expect(timed.options.expiresAtUnixMs == 1_060_500)
        #expect(throws: ServiceError.self) {
            try PlatformRules.prepare(NativePayload(platform: .apns, body: [1], pushType: "background", priority: 10))
        }
        #expect(throws: ServiceError.self) {
            try PlatformRules.prepare(NativePayload(platform: .apns, body: Array(repeating: 0, count: 4097)))
        }
        #expect(throws: ServiceError.self) { try PlatformRules.prepare(NativePayload(platform: .wns, body: [1], pushType: "wns/x")) }
        #expect(throws: ServiceError.self) { try PlatformRules.prepare(NativePayload(body: [1])) }
    }
}
