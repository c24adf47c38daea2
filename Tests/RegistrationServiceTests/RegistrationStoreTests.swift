import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import NotificationHubs
import Testing

@testable import RegistrationService

@Suite("registration store", .watchedForStalls)
struct RegistrationStoreTests {
    let token = String(repeating: "ab", count: 32)

    @Test(
        "POST reuses the owner's registration for a handle and deletes its duplicates",
        arguments: StoreBackend.available)
    func createID(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            let first = try await store.createID(owner: "alice", handle: "")
            let second = try await store.createID(owner: "alice", handle: "")
            #expect(first != second)
            _ = try await store.upsert(owner: "alice", id: first, platform: .apns, handle: token, tags: [])
            _ = try await store.upsert(owner: "alice", id: second, platform: .apns, handle: token, tags: [])
            #expect(try await store.createID(owner: "alice", handle: token) == first)
            #expect(try await store.list(owner: "alice").map(\.registrationID) == [first])
            // Another user with the same handle gets an id of their own: look-ups are scoped.
            #expect(try await store.createID(owner: "bob", handle: token) != first)
        }
    }

    @Test("only the owner can update or delete a registration", arguments: StoreBackend.available)
    func ownerScoping(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            let id = try await store.createID(owner: "alice", handle: "")
            await #expect(throws: ServiceError.notFound("registration \(id) not found")) {
                try await store.upsert(owner: "bob", id: id, platform: .apns, handle: token, tags: [])
            }
            await #expect(throws: ServiceError.notFound("registration \(id) not found")) {
                try await store.delete(owner: "bob", id: id)
            }
            let stored = try await store.upsert(owner: "alice", id: id, platform: .apns, handle: token, tags: ["news"])
            #expect(stored.tags == ["news", "username:alice"])
            try await store.delete(owner: "alice", id: id)
            await #expect(throws: ServiceError.self) {
                try await store.upsert(owner: "alice", id: id, platform: .apns, handle: token, tags: [])
            }
        }
    }

    @Test("an id never PUT expires: its PUT is refused and it is purged", arguments: StoreBackend.available)
    func pendingExpiry(_ backend: StoreBackend) async throws {
        let clock = ManualClock()
        try await withRegistrationStore(backend, pendingTTL: .seconds(60), now: clock.function) { store in
            let used = try await store.createID(owner: "alice", handle: "")
            _ = try await store.upsert(owner: "alice", id: used, platform: .fcm, handle: "t", tags: [])
            let late = try await store.createID(owner: "alice", handle: "")
            clock.advance(seconds: 60)
            await #expect(throws: ServiceError.notFound("registration \(late) not found")) {
                try await store.upsert(owner: "alice", id: late, platform: .fcm, handle: "t", tags: [])
            }
            #expect(try await store.purgePending() == 1)
            // A completed registration does not expire, and can be updated any time.
            _ = try await store.upsert(owner: "alice", id: used, platform: .fcm, handle: "u", tags: [])
            #expect(try await store.list(owner: "alice").map(\.registrationID) == [used])
        }
    }

    @Test("audience pages by id over complete registrations carrying the tag", arguments: StoreBackend.available)
    func audience(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            // Three pages of 50 and a short last one (1,200 devices in pages of 500 took 2,400 writes
            // per backend: 233 s of a CI pass).
            for i in 0..<120 {
                // SQLite's calls run on the caller's thread: a turn of the pool between devices.
                await Task.yield()
                let id = try await store.createID(owner: "u\(i)", handle: "")
                _ = try await store.upsert(
                    owner: "u\(i)", id: id, platform: i % 2 == 0 ? .apns : .fcm, handle: token, tags: ["all"])
            }
            _ = try await store.createID(owner: "pending", handle: "")  // never PUT: not part of any audience
            var after = ""
            var seen: [String] = []
            while case let page = try await store.audience(tag: "all", platform: .unspecified, after: after, limit: 50),
                !page.isEmpty
            {
                seen += page.map(\.registrationID)
                after = page.last!.registrationID
            }
            #expect(seen.count == 120)
            #expect(seen == seen.sorted())
            #expect(try await store.audience(tag: "all", platform: .fcm, after: "", limit: 2000).count == 60)
            #expect(
                try await store.audience(tag: "username:u3", platform: .unspecified, after: "", limit: 10).count == 1)
        }
    }

    @Test(
        "ListDevices: registrations and installations of one hub with tags, filtered by user, tag expression, platform and handle prefix, paged by id",
        arguments: StoreBackend.available)
    func devices(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            for i in 0..<6 {
                let owner = i < 4 ? "alice" : "bob"
                let id = try await store.createID(owner: owner, handle: "")
                let handle = String(format: "%02x", i) + String(repeating: "ab", count: 31)
                _ = try await store.upsert(
                    owner: owner, id: id, platform: i % 2 == 0 ? .apns : .fcm, handle: i % 2 == 0 ? handle : "fcm-\(i)",
                    tags: i % 3 == 0 ? ["sports"] : ["news"])
            }
            _ = try await store.createID(owner: "alice", handle: "")  // allocated, never PUT: not a device yet
            let template = Installation.Template(body: #"{"aps":{"alert":"$(m)"}}"#)
            try await store.putInstallation(
                hub: "default",
                Installation(
                    installationID: "inst-1", userID: "alice", platform: .apns,
                    pushChannel: String(repeating: "cd", count: 32),
                    tags: ["sports"], templates: ["t": template]), maxInstallations: 0)
            try await store.putInstallation(
                hub: "other",
                Installation(
                    installationID: "inst-2", platform: .apns, pushChannel: String(repeating: "ee", count: 32)),
                maxInstallations: 0)
            #expect(
                try await store.removeHandle(
                    platform: .apns, handle: String(repeating: "cd", count: 32), invalidSince: 0) == 1)

            func list(
                user: String? = nil, tag: String? = nil, platform: Platform = .unspecified, prefix: String? = nil,
                after: String = "",
                limit: Int = 100
            ) async throws -> [Registration] {
                try await store.devices(
                    hub: "default", user: user, expression: try tag.map { try TagExpression($0) }, platform: platform,
                    handlePrefix: prefix,
                    after: after, limit: limit)
            }
            let all = try await list()
            // Six registrations and the installation; not its template, not the pending id, not the other hub's.
            #expect(all.count == 7 && all.map(\.registrationID) == all.map(\.registrationID).sorted())
            let installation = try #require(all.first { $0.installationID == "inst-1" })
            #expect(installation.expired && installation.tags.contains("sports"))
            #expect(
                all.filter { $0.installationID.isEmpty }.allSatisfy {
                    !$0.expired && $0.tags.contains("username:\($0.owner)")
                })
            // Four registrations and the installation of userId alice.
            #expect(try await list(user: "alice").count == 5)
            #expect(try await list(user: "bob").map(\.owner) == ["bob", "bob"])
            #expect(try await list(tag: "sports").count == 3)
            #expect(try await list(tag: "sports || username:bob").count == 5)
            #expect(try await list(tag: "news && !username:alice").map(\.owner) == ["bob", "bob"])
            #expect(try await list(platform: .fcm).map(\.handle).sorted() == ["fcm-1", "fcm-3", "fcm-5"])
            #expect(try await list(prefix: "02").map(\.handle) == ["02" + String(repeating: "ab", count: 31)])
            #expect(try await list(prefix: "fcm-", after: "").count == 3)
            #expect(try await list(user: "alice", platform: .apns, prefix: "cd").map(\.installationID) == ["inst-1"])
            // Pages by id: the next starts after the last id shown.
            let first = try await list(limit: 4)
            let second = try await list(after: first.last!.registrationID, limit: 4)
            #expect(
                first.count == 4 && second.count == 3
                    && (first + second).map(\.registrationID) == all.map(\.registrationID))
        }
    }

    @Test("a hub's export: a registration's line carries its tags", arguments: StoreBackend.available)
    func exportTags(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            let id = try await store.createID(owner: "alice", handle: token)
            _ = try await store.upsert(owner: "alice", id: id, platform: .apns, handle: token, tags: ["news"])
            let page = try await store.exportPage(hub: "default", after: "", limit: 10)
            let line = String(decoding: page.lines, as: UTF8.self)
            #expect(page.count == 1 && line.contains(#""tags":["news","username:alice"]"#), "\(line)")
        }
    }

    @Test("a hub's limits and the channel-expired mark are rules outside the store")
    func rules() throws {
        try RegistrationRules.checkRoom(count: 9, limit: 10, of: "installations", hub: "h")
        try RegistrationRules.checkRoom(count: 1_000, limit: 0, of: "installations", hub: "h")
        #expect(throws: ServiceError.self) {
            try RegistrationRules.checkRoom(count: 10, limit: 10, of: "installations", hub: "h")
        }
        #expect(!RegistrationRules.channelExpired(stored: nil, writing: "a"))
        #expect(RegistrationRules.channelExpired(stored: ("a", true), writing: "a"))
        #expect(!RegistrationRules.channelExpired(stored: ("a", true), writing: "b"))
        #expect(!RegistrationRules.channelExpired(stored: ("a", false), writing: "a"))
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
        #expect(throws: ServiceError.self) {
            try RegistrationRules.validateHandle("https://evil.example/x", platform: .wns)
        }
        #expect(throws: ServiceError.self) { try RegistrationRules.validateHandle(token, platform: .unspecified) }
        // Web Push: the PushSubscription JSON, endpoint on a browser's push service only.
        let key = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
        func subscription(_ endpoint: String, p256dh: String = key, auth: String = "BTBZMqHH6r4Tts7J_aSIgg") -> String {
            #"{"endpoint":"\#(endpoint)","keys":{"p256dh":"\#(p256dh)","auth":"\#(auth)"}}"#
        }
        try RegistrationRules.validateHandle(
            subscription("https://fcm.googleapis.com/fcm/send/abc"), platform: .browser)
        try RegistrationRules.validateHandle(
            subscription("https://updates.push.services.mozilla.com/wpush/v2/x"), platform: .browser)
        for bad in [
            subscription("https://169.254.169.254/latest/meta-data"), subscription("http://fcm.googleapis.com/x"),
            subscription("https://fcm.googleapis.com.evil.example/x"),
            subscription("https://fcm.googleapis.com/x", p256dh: "AAAA"),
            subscription("https://fcm.googleapis.com/x", auth: "AAAA"), "not json",
        ] {
            #expect(throws: ServiceError.self, "\(bad)") {
                try RegistrationRules.validateHandle(bad, platform: .browser)
            }
        }
    }

    @Test("a SQLite file from before installation templates had rows gets its templates' rows when the store opens it")
    func templateRowsMigration() async throws {
        let queue = try DatabaseQueue(configuration: HeraldDatabase.configuration)
        try SQLiteDatabase.migrator(for: RegistrationSchema.schema).migrate(queue, upTo: "v3-hubs-installations")
        let installation = try InstallationTests.parse(
            #"{"installationId":"old","platform":"apns","pushChannel":"\#(token)","tags":["news"],"templates":{"fr":{"body":"{\"aps\":{\"alert\":\"$(title)\"}}","tags":["lang_fr"]}}}"#,
            id: "old")
        try await queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, installation_id, document)
                    VALUES ('i-old', '', ?, ?, 1, 1, 'default', 'old', ?)
                    """,
                arguments: [Platform.apns.rawValue, token, Data(try installation.json())])
            try db.execute(sql: "INSERT INTO registration_tag VALUES ('news', 'i-old')")
        }
        let store = try await SQLRegistrationStore(db: SQLiteDatabase(queue))
        let templates = try await store.audience(
            expression: TagExpression("lang_fr && news"), platform: .apns, templates: true, after: "", limit: 10)
        #expect(templates.map { $0.template?.name } == ["fr"])
        #expect(templates.first?.handle == token && templates.first?.template?.body.contains("$(title)") == true)
        // Opening it again changes nothing: the step ran once.
        _ = try await SQLRegistrationStore(db: SQLiteDatabase(queue))
        #expect(
            try await store.audience(tag: "lang_fr", platform: .apns, templates: true, after: "", limit: 10).count == 1)
    }
}

/// Runs `body` with an empty store of `backend`: SQLite in memory, or PostgreSQL in a fresh schema.
func withRegistrationStore(
    _ backend: StoreBackend, pendingTTL: Duration = .seconds(24 * 3600),
    now: @escaping @Sendable () -> Int64 = unixMillis,
    _ body: (any RegistrationStore) async throws -> Void
) async throws {
    try await TestDatabases.withDatabase(backend, service: "registration") { db in
        try await body(SQLRegistrationStore(db: db, pendingTTL: pendingTTL, now: now))
    }
}
