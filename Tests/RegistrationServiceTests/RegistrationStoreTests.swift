import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
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
        let store = try RegistrationStore(db: DatabaseQueue(), pendingTTL: .seconds(60), now: clock.function)
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
