import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import NotificationHubs
import RegistrationService
import Testing

/// NH registrations in the store, on both backends: ETags, listings, and that they are devices like
/// any other (audiences, dead-handle feedback).
@Suite("NH registrations in the store", .watchedForStalls)
struct HubRegistrationStoreTests {
    static let token = String(repeating: "cd", count: 32)

    static func native(_ id: String, handle: String = token, tags: [String] = ["news"]) throws -> HubRegistration {
        try HubRegistrationRules.validated(
            HubRegistration(registrationID: id, platform: .apns, handle: handle, tags: tags), hosts: .init())
    }

    static func template(_ id: String, handle: String = token, tags: [String] = ["news"]) throws -> HubRegistration {
        try HubRegistrationRules.validated(
            HubRegistration(
                registrationID: id, platform: .apns, handle: handle, tags: tags, isTemplate: true, templateName: "t",
                bodyTemplate: #"{"aps":{"alert":"$(message)"}}"#, priority: "5"),
            hosts: .init())
    }

    @Test(
        "every write bumps the ETag; If-Match and create-only guard writes and deletes",
        arguments: StoreBackend.available)
    func etags(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            let (first, created) = try await store.putHubRegistration(
                hub: "h", try Self.native("r1"), ifMatch: 0, createOnly: true, maxRegistrations: 0)
            #expect(created && first.etag == 1)
            let (second, again) = try await store.putHubRegistration(
                hub: "h", try Self.native("r1", tags: ["a"]), ifMatch: 1, createOnly: false, maxRegistrations: 0)
            #expect(!again && second.etag == 2 && second.createdAtUnixMs == first.createdAtUnixMs)
            await #expect(throws: ServiceError.self) {
                _ = try await store.putHubRegistration(
                    hub: "h", try Self.native("r1"), ifMatch: 1, createOnly: false, maxRegistrations: 0)
            }
            await #expect(throws: ServiceError.self) {
                _ = try await store.putHubRegistration(
                    hub: "h", try Self.native("r1"), ifMatch: 0, createOnly: true, maxRegistrations: 0)
            }
            // Another hub's id space is its own.
            #expect(try await store.hubRegistration(hub: "other", id: "r1") == nil)
            await #expect(throws: ServiceError.self) {
                try await store.deleteHubRegistration(hub: "h", id: "r1", ifMatch: 1)
            }
            #expect(try await store.hubRegistration(hub: "h", id: "r1")?.tags == ["a"])
            try await store.deleteHubRegistration(hub: "h", id: "r1", ifMatch: 2)
            #expect(try await store.hubRegistration(hub: "h", id: "r1") == nil)
            // The hub's limit counts registrations.
            _ = try await store.putHubRegistration(
                hub: "h", try Self.native("r2"), ifMatch: 0, createOnly: false, maxRegistrations: 1)
            await #expect(throws: ServiceError.self) {
                _ = try await store.putHubRegistration(
                    hub: "h", try Self.native("r3"), ifMatch: 0, createOnly: false, maxRegistrations: 1)
            }
        }
    }

    @Test(
        "a native registration is in native audiences, a template one in template audiences; feedback deletes both",
        arguments: StoreBackend.available)
    func audiencesAndFeedback(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            _ = try await store.putHubRegistration(
                hub: "h", try Self.native("n1"), ifMatch: 0, createOnly: false, maxRegistrations: 0)
            _ = try await store.putHubRegistration(
                hub: "h", try Self.template("t1"), ifMatch: 0, createOnly: false, maxRegistrations: 0)
            let native = try await store.audience(tag: "news", platform: .unspecified, hub: "h", after: "", limit: 10)
            #expect(native.count == 1 && native[0].handle == Self.token)
            let templates = try await store.audience(
                tag: "news", platform: .unspecified, hub: "h", templates: true, after: "", limit: 10)
            #expect(templates.count == 1)
            // The Priority became the template's apns-priority, as dispatch reads it.
            #expect(
                templates.first?.template?.headers == [HubRegistrationField(name: "apns-priority", value: "5")],
                "\(templates)")
            #expect(try await store.audience(broadcast: "h", platform: .apns, after: "", limit: 10).count == 1)
            #expect(try await store.removeHandle(platform: .apns, handle: Self.token, invalidSince: 0) == 2)
            #expect(try await store.hubRegistration(hub: "h", id: "n1") == nil)
            #expect(try await store.hubRegistration(hub: "h", id: "t1") == nil)
        }
    }

    @Test("listings page by id, by handle and by tag", arguments: StoreBackend.available)
    func listings(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            for n in 0..<5 {
                _ = try await store.putHubRegistration(
                    hub: "h",
                    try Self.native(
                        "r\(n)", handle: String(repeating: "0\(n % 2)", count: 32), tags: [n % 2 == 0 ? "even" : "odd"]),
                    ifMatch: 0, createOnly: false, maxRegistrations: 0)
            }
            let page = try await store.listHubRegistrations(
                hub: "h", handle: nil, tag: nil, after: .init(key: "r1"), limit: 2)
            #expect(page.map(\.registration.registrationID) == ["r2", "r3"])
            // An installation is listed among registrations as NH lists it: a native registration
            // with its id, its tags plus $InstallationId, its last write as ETag; and read and
            // deleted through the registration routes.
            _ = try await store.putInstallation(
                hub: "h",
                Installation(
                    installationID: "r2a", userID: "u", platform: .fcm, pushChannel: "fcm-token", tags: ["even"]))
            let mixed = try await store.listHubRegistrations(
                hub: "h", handle: nil, tag: "even", after: .start, limit: 10)
            #expect(mixed.map(\.registration.registrationID) == ["r0", "r2", "r2a", "r4"])
            let installation = try #require(try await store.hubRegistration(hub: "h", id: "r2a"))
            #expect(installation.platform == .fcm && installation.handle == "fcm-token" && !installation.isTemplate)
            #expect(installation.tags == ["even", "$InstallationId:{r2a}", "$UserId:{u}"])
            #expect(installation.etag == installation.updatedAtUnixMs)
            await #expect(throws: ServiceError.self) {
                try await store.deleteHubRegistration(hub: "h", id: "r2a", ifMatch: installation.etag + 1)
            }
            try await store.deleteHubRegistration(hub: "h", id: "r2a", ifMatch: installation.etag)
            #expect(try await store.installation(hub: "h", id: "r2a") == nil)
            let byHandle = try await store.listHubRegistrations(
                hub: "h", handle: String(repeating: "01", count: 32), tag: nil, after: .start, limit: 10)
            #expect(byHandle.map(\.registration.registrationID) == ["r1", "r3"])
            let byTag = try await store.listHubRegistrations(
                hub: "h", handle: nil, tag: "even", after: .start, limit: 10)
            #expect(byTag.map(\.registration.registrationID) == ["r0", "r2", "r4"])
        }
    }

    @Test("validation: native fields only on templates, tags by the tutorial's rules, ids by NH's")
    func validation() throws {
        for bad in [
            HubRegistration(registrationID: "r", platform: .apns, handle: Self.token, bodyTemplate: "{}"),
            HubRegistration(registrationID: "r", platform: .apns, handle: Self.token, tags: ["$UserId:x"]),
            HubRegistration(registrationID: "r/x", platform: .apns, handle: Self.token),
            HubRegistration(registrationID: "r", platform: .unspecified, handle: Self.token),
            HubRegistration(
                registrationID: "r", platform: .apns, handle: Self.token, isTemplate: true, bodyTemplate: "{\"a\":$(x"),
            HubRegistration(
                registrationID: "r", platform: .apns, handle: Self.token, isTemplate: true, bodyTemplate: "{}",
                priority: "7"),
        ] {
            #expect(throws: ServiceError.self, "\(bad)") { try HubRegistrationRules.validated(bad, hosts: .init()) }
        }
    }
}
