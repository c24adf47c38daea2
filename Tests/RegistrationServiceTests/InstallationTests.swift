import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import NotificationHubs
import Testing

@testable import RegistrationService

/// NH installations in the store (their JSON and JSON-Patch: NotificationHubsTests.InstallationFormatTests).
@Suite("installations", .watchedForStalls)
struct InstallationTests {
    static let hosts = RegistrationRules.PushHosts(wns: ["notify.windows.com"], webPush: ["fcm.googleapis.com"])
    static let token = String(repeating: "ab", count: 32)

    static func parse(_ json: String, id: String = "dev-1") throws -> Installation {
        try Installation.parse(Array(json.utf8), id: id, hosts: hosts)
    }

    @Test(
        "the store: read-your-writes, system tags, hubs apart, feedback marks expired and sends skip it, lists page by id",
        arguments: StoreBackend.available)
    func store(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            for n in 0..<5 {
                try await store.putInstallation(
                    hub: "app1",
                    try Self.parse(
                        #"{"installationId":"d\#(n)","platform":"apns","pushChannel":"\#(String(format: "%064x", n))","userId":"u\#(n % 2)","tags":["t\#(n % 3)"]}"#,
                        id: "d\(n)"))
            }
            try await store.putInstallation(
                hub: "app2",
                try Self.parse(#"{"installationId":"d0","platform":"apns","pushChannel":"\#(Self.token)"}"#, id: "d0"))
            #expect(try await store.installation(hub: "app1", id: "d3")?.userID == "u1")
            #expect(try await store.installation(hub: "app2", id: "d0")?.pushChannel == Self.token)
            #expect(try await store.installation(hub: "app3", id: "d0") == nil)
            func audience(_ text: String, hub: String = "app1") async throws -> [String] {
                try await store.audience(
                    expression: TagExpression(text), platform: .unspecified, hub: hub, after: "", limit: 100
                ).map(
                    \.installationID
                )
                .sorted()
            }
            #expect(try await audience("$InstallationId:{d2}") == ["d2"])
            #expect(try await audience("$userid:{u1}") == ["d1", "d3"])
            #expect(try await audience("$UserId:{u0} && !t0") == ["d2", "d4"])
            #expect(try await audience("$InstallationId:{d0}", hub: "app2") == ["d0"])

            // Feedback: marked expired, kept, skipped by sends; the same channel again keeps the mark, a new one clears it.
            #expect(
                try await store.removeHandle(platform: .apns, handle: String(format: "%064x", 2), invalidSince: 0) == 1)
            #expect(try await store.installation(hub: "app1", id: "d2")?.pushChannelExpired == true)
            #expect(try await audience("$InstallationId:{d2}") == [])
            var d2 = try #require(try await store.installation(hub: "app1", id: "d2"))
            d2.tags = ["t9"]
            #expect(try await store.putInstallation(hub: "app1", d2).pushChannelExpired)
            d2.pushChannel = String(repeating: "ef", count: 32)
            #expect(try await !store.putInstallation(hub: "app1", d2).pushChannelExpired)
            #expect(try await audience("t9") == ["d2"])

            // Lists: filters in SQL, pages in installation id order.
            let all = try await store.listInstallations(
                hub: "app1", expression: nil, userID: nil, platform: .unspecified, after: "", limit: 3)
            #expect(all.map(\.installationID) == ["d0", "d1", "d2"])
            let next = try await store.listInstallations(
                hub: "app1", expression: nil, userID: nil, platform: .unspecified, after: "d2", limit: 3)
            #expect(next.map(\.installationID) == ["d3", "d4"])
            #expect(
                try await store.listInstallations(
                    hub: "app1", expression: TagExpression("t1"), userID: "u0", platform: .apns, after: "", limit: 9
                )
                .map(\.installationID) == ["d4"])

            #expect(try await store.deleteInstallation(hub: "app1", id: "d0"))
            #expect(try await !store.deleteInstallation(hub: "app1", id: "d0"))
            #expect(try await store.installation(hub: "app2", id: "d0") != nil)
            let export = try await store.exportPage(hub: "app1", after: "", limit: 100)
            #expect(export.count == 4)
            #expect(
                String(decoding: export.lines, as: UTF8.self).split(separator: "\n").allSatisfy {
                    $0.contains(#""kind":"installation""#)
                })
        }
    }

    @Test(
        "a write changes only what changed: a kept template keeps its row and id, tags follow by difference, a dropped template's row goes, a new one gets one",
        arguments: StoreBackend.available)
    func rewrite(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            let sql = try #require(store as? SQLRegistrationStore).db
            func installation(tags: String, templates: String) throws -> Installation {
                try Self.parse(
                    #"{"installationId":"d1","platform":"apns","pushChannel":"\#(Self.token)","tags":[\#(tags)],"templates":{\#(templates)}}"#,
                    id: "d1")
            }
            /// Each row of hub h by its template name ("" for the installation's own): id and tags.
            func rows() async throws -> [String: (id: String, tags: Set<String>)] {
                var rows: [String: (id: String, tags: Set<String>)] = [:]
                for row in try await sql.query(
                    """
                    SELECT r.id, COALESCE(r.template_name, ''), t.tag FROM registration r
                    LEFT JOIN registration_tag t ON t.registration_id = r.id WHERE r.hub = 'h'
                    """)
                {
                    let name: String = try row[1]
                    let id: String = try row[0]
                    var entry = rows[name] ?? (id, [])
                    if let tag: String = try row[2] { entry.tags.insert(tag) }
                    rows[name] = entry
                }
                return rows
            }
            let body = #""body":"{\"aps\":{\"alert\":\"$(m)\"}}""#
            let first = try installation(
                tags: #""a","b""#, templates: #""t1":{\#(body),"tags":["x"]},"t2":{\#(body)}"#)
            try await store.putInstallation(hub: "h", first)
            let before = try await rows()
            #expect(Set(before.keys) == ["", "t1", "t2"])
            #expect(before["t1"]?.tags == Set(first.audienceTags + (first.templates["t1"]?.tags ?? [])))

            // Tags changed, t2 dropped, t3 new, t1 kept.
            let second = try installation(
                tags: #""b","c""#, templates: #""t1":{\#(body),"tags":["x"]},"t3":{\#(body),"tags":["y"]}"#)
            try await store.putInstallation(hub: "h", second)
            let after = try await rows()
            #expect(Set(after.keys) == ["", "t1", "t3"])
            #expect(after[""]?.id == before[""]?.id && after["t1"]?.id == before["t1"]?.id)
            #expect(after[""]?.tags == Set(second.audienceTags))
            #expect(after["t1"]?.tags == Set(second.audienceTags + (second.templates["t1"]?.tags ?? [])))
            #expect(after["t3"]?.tags == Set(second.audienceTags + (second.templates["t3"]?.tags ?? [])))
            #expect(after["t3"]?.tags.contains("y") == true && after["t1"]?.tags.contains("c") == true)
            #expect(
                try await sql.query("SELECT 1 FROM registration_tag WHERE registration_id = \(before["t2"]?.id ?? "")")
                    .isEmpty)

            // A patch through the store, as NH's PATCH: the same again, the channel too.
            let patched = try await store.patchInstallation(hub: "h", id: "d1") {
                $0.pushChannel = String(repeating: "cd", count: 32)
            }
            #expect(patched.pushChannel == String(repeating: "cd", count: 32))
            let handles = try await sql.query("SELECT DISTINCT handle FROM registration WHERE hub = 'h'") {
                try $0[0] as String
            }
            #expect(
                handles == [String(repeating: "cd", count: 32)], "the template rows follow the installation's channel")
            #expect(try await rows()["t1"]?.id == before["t1"]?.id)
        }
    }

    @Test(
        "a hub's installation limit: one more new installation is RESOURCE_EXHAUSTED; replacing one, and other hubs, are not",
        arguments: StoreBackend.available)
    func limit(_ backend: StoreBackend) async throws {
        try await withRegistrationStore(backend) { store in
            func put(_ id: String, hub: String = "small", limit: Int64 = 2) async throws {
                try await store.putInstallation(
                    hub: hub,
                    try Self.parse(
                        #"{"installationId":"\#(id)","platform":"apns","pushChannel":"\#(Self.token)"}"#, id: id),
                    maxInstallations: limit)
            }
            try await put("a")
            try await put("b")
            await #expect(throws: Never.self) { try await put("a") }
            do {
                try await put("c")
                Issue.record("a third installation was accepted over the limit")
            } catch let error as ServiceError {
                #expect(
                    error.code == .resourceExhausted && error.retryAfterSeconds == nil
                        && error.message.contains("limit of 2"), "\(error)")
            }
            await #expect(throws: Never.self) { try await put("c", hub: "other") }
            await #expect(throws: Never.self) { try await put("c", limit: 0) }
            #expect(
                try await store.listInstallations(
                    hub: "small", expression: nil, userID: nil, platform: .unspecified, after: "", limit: 9
                )
                .count == 3)
        }
    }
}
