import Foundation
import GRDB
import HeraldClient
import HeraldService
import HeraldStack
import HeraldTestSupport
import Logging
import PostgresNIO
import StackTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `herald users erase` and a hub's `DELETE /{hub}/users/{userId}`, checked by reading every row of
/// every table of the four services' databases afterwards: the SQLite files, or in the pass that
/// runs every stack on PostgreSQL, every table of the four schemas.
@Suite("erase a user's data", .serialized, .timeLimit(.minutes(5)), .watchedForStalls)
struct ErasureDrillTests {
    @Test(
        "herald users export writes one JSON document of the person's account, devices, content and sends, page by page; nobody else's"
    )
    func export() async throws {
        let y = "yve.export"
        try await LiveStack.with(auth: .accounts, users: [y, "bob", "sender"]) { live in
            let edge = live.edge
            let handles = (0..<3).map { apnsToken(9100 + $0) }
            for handle in handles { try await live.register(y, handle: handle, tags: ["news"]) }
            try await live.register("bob", handle: apnsToken(9200), tags: ["news"])
            let full = try await NHFixture.defaultHub(live)
            let sas = NHFixture.token(sr: NHFixture.root(live), full)
            let install = try await edge.request(
                "PUT", "/default/installations/yve-phone", authorization: sas,
                body: #"{"installationId":"yve-phone","platform":"fcmv1","pushChannel":"fcm-yve","userId":"\#(y)"}"#)
            try #require(install.status == 200, "\(install.text)")
            #expect(
                [200, 202].contains(
                    try await edge.request(
                        "POST", "/v1/notifications?kind=secure&to_user=\(y)", as: "sender", body: "for yve only"
                    ).status))
            #expect(
                [200, 202].contains(
                    try await edge.request(
                        "POST", "/v1/notifications?kind=secure&to_user=bob", as: y, body: "bob's to read"
                    ).status))

            // The secure push to yve has reached her three phones (the inbox provider records it).
            let reached = try await live.waitForInbox(count: 3, timeout: .seconds(30)) { handles.contains($0.handle) }
            try #require(reached.count == 3)

            let file = live.configuration.directory + "/export.json"
            let herald = live.configuration.binDirectory + "/herald"
            let run = try await runProgram(
                herald,
                [
                    "users", "export", y, "--out", file, "--page-size", "2", "--runtime-dir",
                    live.configuration.runtimeDirectory,
                ])
            try #require(run.status == 0, "herald users export: \(run.error)")
            #expect(
                run.error.contains("4 device(s), 3 delivery record(s), 3 inbox entr(ies), 2 content(s)"), "\(run.error)"
            )
            let document = try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file))) as? [String: Any])
            #expect(document["user"] as? String == y)
            let account = try #require(document["account"] as? [String: Any])
            #expect((account["account"] as? [String: Any])?["name"] as? String == y)
            #expect((account["grants"] as? [[String: Any]])?.first?["hub"] as? String == "default")
            let devices = try #require(document["devices"] as? [[String: Any]])
            #expect(Set(devices.compactMap { $0["handle"] as? String }) == Set(handles + ["fcm-yve"]))
            let phone = try #require(devices.first { $0["handle"] as? String == "fcm-yve" })
            #expect((phone["nh"] as? [String: Any])?["userId"] as? String == y, "the installation's own JSON")
            // Dispatch's records of her phones, paged two by two over pages of two devices.
            let deliveries = try #require(document["deliveries"] as? [[String: Any]])
            #expect(Set(deliveries.compactMap { $0["handle"] as? String }) == Set(handles))
            #expect(deliveries.allSatisfy { $0["state"] as? String == "DELIVERY_STATE_DELIVERED" }, "\(deliveries)")
            let inbox = try #require(document["inbox"] as? [[String: Any]])
            #expect(Set(inbox.compactMap { $0["handle"] as? String }) == Set(handles))
            #expect(inbox.allSatisfy { ($0["payload"] as? String)?.contains("secureId") == true }, "\(inbox)")
            let content = try #require(document["content"] as? [[String: Any]])
            let received = try #require(content.first { $0["direction"] as? String == "received" })
            #expect(received["content"] as? String == Data("for yve only".utf8).base64EncodedString())
            let sent = try #require(content.first { $0["direction"] as? String == "sent" })
            #expect(sent["recipient"] as? String == "bob" && sent["content"] == nil)
            let sends = try #require(document["sends"] as? [[String: Any]])
            #expect(sends.count == 2, "the send to yve and yve's to bob")
            // Nothing of bob's beyond what yve sent him.
            let text = try String(contentsOfFile: file, encoding: .utf8)
            #expect(!text.contains(apnsToken(9200)))

            // Dispatch takes as many devices a call as the CLI gathers, and refuses more.
            let ids = deliveries.compactMap { $0["registrationId"] as? String }
            try #require(ids.count == 3)
            try await RPCClient.with(
                socketPath: live.configuration.socketPath("dispatch"), transport: .lean, timeout: .testRPC
            ) { client in
                let dispatch = DispatchServiceClient(client)
                var request = ExportDeviceRecordsRequest(kind: .deliveries, limit: 10)
                request.devices =
                    (0..<ExportLimits.devicesPerCall - ids.count).map { UserDevice(registrationID: "nobody-\($0)") }
                    + ids.map { UserDevice(registrationID: $0) }
                let found = try await dispatch.exportDeviceRecords(request).items
                #expect(found.count == 3)
                request.devices.append(UserDevice(registrationID: "one-too-many"))
                let refused = await #expect(throws: ServiceError.self) {
                    try await dispatch.exportDeviceRecords(request)
                }
                #expect(refused?.code == .invalidArgument)
                #expect(
                    refused?.message.contains("\(ExportLimits.devicesPerCall)") == true,
                    "\(String(describing: refused))")
            }
        }
    }

    @Test("DELETE /{hub}/users/{userId} needs Manage, erases that hub's devices with the userId, and nothing else")
    func hubRoute() async throws {
        try await LiveStack.with { live in
            let hub = try await NHFixture.hub("erasehub", live)
            let root = NHFixture.root(live)
            let full = NHFixture.token(sr: root, hub.full)
            let listen = NHFixture.token(sr: root, hub.listen)
            for (id, user) in [("a1", "hub-user"), ("a2", "hub-user"), ("b1", "other")] {
                let put = try await live.edge.request(
                    "PUT", "/erasehub/installations/\(id)", authorization: listen,
                    body:
                        #"{"installationId":"\#(id)","platform":"fcmv1","pushChannel":"fcm-\#(id)","userId":"\#(user)"}"#
                )
                try #require(put.status == 200, "\(put.text)")
            }
            let refused = try await live.edge.request("DELETE", "/erasehub/users/hub-user", authorization: listen)
            #expect(refused.status == 401, "\(refused.text)")
            let erased = try await live.edge.request("DELETE", "/erasehub/users/hub-user", authorization: full)
            #expect(erased.status == 200, "\(erased.text)")
            let report = try JSONDecoder().decode(UserErasure.Report.self, from: erased.body)
            #expect(report.devicesRemoved == 2 && report.accountRows == 0)
            for (id, status) in [("a1", 404), ("a2", 404), ("b1", 200)] {
                #expect(
                    try await live.edge.request("GET", "/erasehub/installations/\(id)", authorization: full).status
                        == status, "\(id)")
            }
            let again = try await live.edge.request("DELETE", "/erasehub/users/hub-user", authorization: full)
            #expect(again.status == 200 && again.text.contains(#""devicesRemoved":0"#), "\(again.text)")
        }
    }

}
