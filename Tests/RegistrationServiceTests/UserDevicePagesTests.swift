import Foundation
import HeraldModel
import HeraldProto
import HeraldSQL
import HeraldTestSupport
import NotificationHubs
import Testing

@testable import RegistrationService

/// An export's or erase's pages of one person's devices: read a page at a time from the
/// owner and tag indexes, they must be exactly the rows the whole-set definition
/// (``RegistrationErasure/isUsers(_:hub:alias:)``) picks, in id order, with nothing left out or
/// repeated, whatever the page size.
@Suite("a person's devices, page by page", .watchedForStalls)
struct UserDevicePagesTests {
    static let hosts = InstallationTests.hosts

    @Test(
        "pages of 1, 2, 3 and 1000 give exactly the person's rows: owned, tagged, installations, templates",
        arguments: StoreBackend.available)
    func pagesMatchTheWholeSet(_ backend: StoreBackend) async throws {
        try await TestDatabases.withDatabase(backend, service: "registration") { db in
            let store = try await SQLRegistrationStore(db: db)
            // Alice's tutorial registrations (tagged username:alice by the server), one id never PUT
            // (owned, no tag), bob's, and one of bob's that a client tagged with alice's name.
            for n in 0..<4 {
                let id = try await store.createID(owner: "alice", handle: "")
                _ = try await store.upsert(
                    owner: "alice", id: id, platform: .apns, handle: String(format: "%064x", n), tags: ["n\(n)"])
            }
            _ = try await store.createID(owner: "alice", handle: "")
            for n in 0..<3 {
                let id = try await store.createID(owner: "bob", handle: "")
                _ = try await store.upsert(
                    owner: "bob", id: id, platform: .fcm, handle: "bob-\(n)", tags: n == 0 ? ["username:alice"] : [])
            }
            // Installations with alice's userId, with templates, in two hubs; others' too.
            for (hub, id, user) in [
                ("app1", "a1", "alice"), ("app1", "a2", "alice"), ("app2", "a3", "alice"),
                ("app1", "c1", "carol"), ("app2", "c2", ""),
            ] {
                let userField = user.isEmpty ? "" : #","userId":"\#(user)""#
                try await store.putInstallation(
                    hub: hub,
                    try Installation.parse(
                        Array(
                            #"{"installationId":"\#(id)","platform":"apns","pushChannel":"\#(String(repeating: "c", count: 64))"\#(userField),"templates":{"one":{"body":"{\"aps\":{}}"},"two":{"body":"{}","tags":["x"]}}}"#
                                .utf8), id: id, hosts: Self.hosts))
            }

            for hub in ["", "app1", "app2"] {
                let expected: [String] = try await db.query(
                    """
                    SELECT x.id FROM registration x WHERE \(RegistrationErasure.isUsers("alice", hub: hub, alias: "x"))
                    ORDER BY x.id
                    """
                ) { try $0[0] }
                #expect(!expected.isEmpty)
                for size in [1, 2, 3, 1000] {
                    var seen: [String] = []
                    var after = ""
                    while true {
                        let page = try await store.userDevices(user: "alice", hub: hub, after: after, limit: size)
                        let records = try await store.exportUserDevices(
                            user: "alice", hub: hub, after: after, limit: size)
                        #expect(records.map(\.id) == page.map(\.registrationID))
                        guard let last = page.last else { break }
                        #expect(page.count <= size)
                        seen += page.map(\.registrationID)
                        after = last.registrationID
                    }
                    #expect(seen == expected, "hub '\(hub)', pages of \(size)")
                }
            }
            // What the whole set holds: 4 tutorial rows + 1 never PUT + bob's tagged one (6), and
            // 3 installations with 2 templates each (9).
            let all: [String] = try await db.query(
                "SELECT x.id FROM registration x WHERE \(RegistrationErasure.isUsers("alice", hub: "", alias: "x"))"
            ) { try $0[0] }
            #expect(all.count == 15)
        }
    }
}
