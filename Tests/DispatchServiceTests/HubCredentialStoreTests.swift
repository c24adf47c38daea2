import Crypto
import Foundation
import HeraldModel
import HeraldProto
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Testing

@testable import DispatchService

/// Hubs' credentials as dispatch's database keeps them: the platform's message, on both backends,
/// and rows from before that kept named settings in JSON.
@Suite("hub credential store", .watchedForStalls)
struct HubCredentialStoreTests {
    /// A migrated, empty store of `backend`, and its database for rows written by hand.
    static func withStore(
        _ backend: StoreBackend, _ body: (HubCredentialStore, any SQLDatabase) async throws -> Void
    ) async throws {
        try await withOutbox(backend) { fixture in try await body(HubCredentialStore(db: fixture.db), fixture.db) }
    }

    static let apns = try! SetHubCredentialsRequest(
        hub: "shop", platform: .apns,
        settings: [
            "key": P256.Signing.PrivateKey().pemRepresentation, "key-id": "KEY1234567", "team-id": "TEAM123456",
            "topic": "com.example.shop", "environment": "sandbox",
        ])
    static let wnsSettings = ["client-id": "c", "client-secret": "s\"\\ é", "token-url": "https://127.0.0.1:1/t"]

    @Test(
        "with a keyring, a hub's credentials are sealed in the table, listed whole, re-sealed after a rotation",
        arguments: StoreBackend.available)
    func sealed(_ backend: StoreBackend) async throws {
        try await withTemporaryFolder("herald-keys") { folder in
            let box = SecretBox(keyring: try Keyring(folder: folder), purpose: "push credentials")
            try await withOutbox(backend) { fixture in
                // A row stored before encryption was turned on, then one sealed.
                try await HubCredentialStore(db: fixture.db).set(Self.apns)
                let store = HubCredentialStore(db: fixture.db, box: box)
                try await store.set(try SetHubCredentialsRequest(hub: "t2", platform: .wns, settings: Self.wnsSettings))
                let raw = try await fixture.db.query("SELECT credentials FROM hub_credential ORDER BY hub") {
                    row -> [UInt8] in try row[0]
                }
                #expect(String(decoding: raw[0], as: UTF8.self).contains("BEGIN PRIVATE KEY"), "the row from before")
                #expect(!String(decoding: raw[1], as: UTF8.self).contains("s\"\\ é") && box.isCurrent(raw[1]))
                let listed = try await store.all().map { try $0.request.get() }
                #expect(listed.count == 2 && listed[0].apns == Self.apns.apns)
                #expect(try listed[1].namedSettings().settings["client-secret"] == Self.wnsSettings["client-secret"])
                #expect(try await store.rewrapAll() == 1)
                #expect(try await store.rewrapAll() == 0)
                try Keyring.addCurrentKey(folder: folder, name: "k2")
                try await box.keyring.reload()
                #expect(try await store.rewrapAll() == 2)
                let now = try await fixture.db.query("SELECT credentials FROM hub_credential") { row -> [UInt8] in
                    try row[0]
                }
                #expect(
                    now.allSatisfy { box.isCurrent($0) && !String(decoding: $0, as: UTF8.self).contains("PRIVATE") })
                #expect(try await store.all().map { try $0.request.get() } == listed)
            }
        }
    }

    @Test(
        "hubs' credentials are stored, listed and deleted (on PostgreSQL, shared through the database)",
        arguments: StoreBackend.available)
    func credentials(_ backend: StoreBackend) async throws {
        try await Self.withStore(backend) { store, _ in
            try await store.set(try SetHubCredentialsRequest(hub: "h1", platform: .fcm, settings: ["url": "p"]))
            try await store.set(try SetHubCredentialsRequest(hub: "h1", platform: .apns, settings: ["key": "k"]))
            #expect(
                try await store.all().map { try $0.request.get().namedSettings().settings } == [
                    ["key": "k"], ["url": "p"],
                ])
            #expect(try await store.delete(hub: "h1", platform: .fcm) == 1)
            #expect(try await store.delete(hub: "h1", platform: .unspecified) == 1)
            #expect(try await store.all().isEmpty)
        }
    }

    @Test("what is set is what is read back, one row per hub and platform", arguments: StoreBackend.available)
    func roundTrip(_ backend: StoreBackend) async throws {
        try await Self.withStore(backend) { store, _ in
            let first = try await store.set(Self.apns)
            var wns = try SetHubCredentialsRequest(hub: "shop", platform: .wns, settings: Self.wnsSettings)
            try await store.set(wns)
            // Set again: replaced, not added.
            wns.wns?.clientSecret = "s2"
            let second = try await store.set(wns)
            #expect(second >= first)
            let all = try await store.all()
            #expect(all.map(\.platform) == [.apns, .wns])
            #expect(all.map(\.hub) == ["shop", "shop"])
            #expect(try all[0].request.get() == Self.apns)
            #expect(try all[1].request.get() == wns)
            #expect(all[1].updatedAt == second)
            // What dispatch makes of them: the same as from the request that set them.
            #expect(
                try PlatformCredentials.parse(all[0].request.get()).summary
                    == PlatformCredentials.parse(Self.apns).summary)
            #expect(try await store.delete(hub: "shop", platform: .apns) == 1)
            #expect(try await store.all().map(\.platform) == [.wns])
        }
    }

    @Test(
        "a request setting no platform, or two, is refused before anything is stored", arguments: StoreBackend.available
    )
    func onePlatform(_ backend: StoreBackend) async throws {
        try await Self.withStore(backend) { store, _ in
            var two = Self.apns
            two.wns = WnsCredentials(clientID: "c", clientSecret: "s", tokenUrl: "")
            await #expect(throws: ServiceError.self) { try await store.set(two) }
            await #expect(throws: ServiceError.self) { try await store.set(SetHubCredentialsRequest(hub: "shop")) }
            let stored = try await store.all()
            #expect(stored.isEmpty)
        }
    }

    @Test(
        "rows holding named settings (stored before outbox-v19 / dispatch-v13, or by an older replica) are rewritten as their message on the next read; unreadable ones are listed with why and left as they are",
        arguments: StoreBackend.available)
    func namedSettingsConverted(_ backend: StoreBackend) async throws {
        try await Self.withStore(backend) { store, db in
            func insertOld(_ hub: String, _ platform: Platform, _ settings: String, at: Int64) async throws {
                try await db.execute(
                    """
                    INSERT INTO hub_credential (hub, platform, settings, updated_at)
                    VALUES (\(hub), \(platform.rawValue), \(settings), \(at))
                    """)
            }
            let json = String(
                decoding: try JSONSerialization.data(withJSONObject: Self.wnsSettings, options: [.sortedKeys]),
                as: UTF8.self)
            try await insertOld("old", .wns, json, at: 7)
            try await insertOld("broken", .wns, "{not json", at: 8)
            try await insertOld("unknown-name", .fcm, #"{"colour":"red"}"#, at: 9)
            let all = try await store.all()
            // The unreadable rows are listed with why (dispatch logs it and loads the others).
            #expect(all.map(\.hub) == ["broken", "old", "unknown-name"])
            #expect(all.filter { (try? $0.request.get()) == nil }.map(\.hub) == ["broken", "unknown-name"])
            let old = try #require(all.first { $0.hub == "old" })
            #expect(
                try old.request.get()
                    == SetHubCredentialsRequest(hub: "old", platform: .wns, settings: Self.wnsSettings))
            // Kept its time (a replica that loaded it before sees no change), and converted once.
            #expect(old.updatedAt == 7)
            let rows = try await db.query("SELECT hub, settings FROM hub_credential WHERE settings = ''") {
                row -> [String] in [try row[0], try row[1]]
            }
            #expect(rows == [["old", ""]])
            #expect(try await store.convertNamedSettings() == 0)
            // An older replica (rolling upgrade) sets them again as it writes: named settings, a
            // new time, and the message it does not know left as it was. Its write is what counts.
            var newer = Self.wnsSettings
            newer["client-secret"] = "rotated"
            let newerJSON = String(
                decoding: try JSONSerialization.data(withJSONObject: newer, options: [.sortedKeys]), as: UTF8.self)
            try await db.execute(
                "UPDATE hub_credential SET settings = \(newerJSON), updated_at = 12 WHERE hub = 'old'")
            let reread = try #require(try await store.all().first { $0.hub == "old" })
            #expect(try reread.request.get().wns?.clientSecret == "rotated")
            #expect(reread.updatedAt == 12)
            // The unreadable rows are still there, as they were: nothing is lost by reading them.
            let left = try await db.query("SELECT hub FROM hub_credential WHERE settings <> '' ORDER BY hub") {
                row -> String in try row[0]
            }
            #expect(left == ["broken", "unknown-name"])
        }
    }
}
