import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import Logging
import NotificationHubs
import Testing

@testable import RegistrationService

/// herald-registration's RPC handlers, called as the method table calls them: what any gRPC
/// client may send (bounds, ids, pages, tokens), answered with a status and a message, never more
/// rows than asked. Who may read what is EdgeTests.ReadScopeTests'; the store's rules are the
/// store tests'.
@Suite("registration handlers", .watchedForStalls)
struct RegistrationHandlersTests {
    static let context = RPCContext(requestID: "handlers", method: "test", logger: Logger(label: "test"))
    static let hosts = RegistrationRules.PushHosts(wns: ["notify.windows.com"], webPush: ["fcm.googleapis.com"])

    static func token(_ n: Int) -> String { String(format: "%064x", n) }

    static func installation(_ id: String, token: Int = 1, user: String? = nil, tags: [String] = []) -> [UInt8] {
        var object: [String: Any] = ["installationId": id, "platform": "apns", "pushChannel": Self.token(token)]
        if let user { object["userId"] = user }
        if !tags.isEmpty { object["tags"] = tags }
        return [UInt8]((try? jsonData(object)) ?? Data())
    }

    /// The handlers over a fresh SQLite store.
    static func withHandlers(testMode: Bool = false, _ body: (RegistrationHandlers) async throws -> Void)
        async throws
    {
        try await withRegistrationStore(.sqlite) { store in
            try await body(RegistrationHandlers(store: store, hosts: hosts, testMode: testMode))
        }
    }

    @Test("installations list a page at a time: the token goes on where the page ended; a forged one is refused")
    func installationPages() async throws {
        try await Self.withHandlers { handlers in
            for n in 0..<7 {
                _ = try await handlers.putInstallation(
                    PutInstallationRequest(
                        hub: "h", installationID: "i\(n)", json: Self.installation("i\(n)", token: n)),
                    context: Self.context)
            }
            var seen: [String] = []
            var token = ""
            var pages = 0
            repeat {
                let page = try await handlers.listInstallations(
                    ListInstallationsRequest(hub: "h", continuationToken: token, limit: 3, scope: .hub),
                    context: Self.context)
                seen += try page.installations.map { bytes in
                    let object = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
                    return object?["installationId"] as? String ?? "?"
                }
                token = page.continuationToken
                pages += 1
            } while !token.isEmpty && pages < 10
            #expect(seen == (0..<7).map { "i\($0)" } && pages == 3)
            for forged in ["%%%", "a", String(repeating: "A", count: 5)] {
                #expect(
                    await statusCode {
                        try await handlers.listInstallations(
                            ListInstallationsRequest(hub: "h", continuationToken: forged, scope: .hub),
                            context: Self.context)
                    } == .invalidArgument, "\(forged)")
            }
            for limit: Int32 in [-1, 1001] {
                #expect(
                    await statusCode {
                        try await handlers.listInstallations(
                            ListInstallationsRequest(hub: "h", limit: limit, scope: .hub), context: Self.context)
                    } == .invalidArgument)
            }
            // Another hub's installations are another listing.
            let other = try await handlers.listInstallations(
                ListInstallationsRequest(hub: "other", scope: .hub), context: Self.context)
            #expect(other.installations.isEmpty && other.continuationToken.isEmpty)
        }
    }

    @Test("a PUT: the body names the path's id, the hub's limit holds for new ids and not for replacements")
    func installationLimits() async throws {
        try await Self.withHandlers { handlers in
            func put(_ id: String, body: String? = nil, max: Int64 = 2) async -> StatusCode? {
                await statusCode {
                    try await handlers.putInstallation(
                        PutInstallationRequest(
                            hub: "h", installationID: id, json: Self.installation(body ?? id), maxInstallations: max),
                        context: Self.context)
                }
            }
            #expect(await put("a") == nil)
            #expect(await put("b") == nil)
            #expect(await put("c") == .resourceExhausted)
            #expect(await put("a") == nil, "replacing one at the limit")
            #expect(await put("d", body: "e") == .invalidArgument)
            #expect(await put("d", max: -1) == .invalidArgument)
            #expect(await put(String(repeating: "x", count: Installation.maxIDLength + 1)) == .invalidArgument)
            #expect(await put("c", max: 0) == nil, "0 is no limit")
            for id in ["", String(repeating: "x", count: Installation.maxIDLength + 1)] {
                #expect(
                    await statusCode {
                        try await handlers.getInstallation(
                            GetInstallationRequest(hub: "h", installationID: id), context: Self.context)
                    } == .invalidArgument)
            }
            #expect(
                await statusCode {
                    try await handlers.getInstallation(
                        GetInstallationRequest(hub: "h", installationID: "zz"), context: Self.context)
                } == .notFound)
            let absent = try await handlers.deleteInstallation(
                DeleteInstallationRequest(hub: "h", installationID: "zz"), context: Self.context)
            #expect(!absent.deleted)
            let present = try await handlers.deleteInstallation(
                DeleteInstallationRequest(hub: "h", installationID: "a"), context: Self.context)
            #expect(present.deleted)
        }
    }

    @Test(
        "a PATCH of an unknown installation is NOT_FOUND; one that is not a patch is INVALID_ARGUMENT and changes nothing"
    )
    func patches() async throws {
        try await Self.withHandlers { handlers in
            _ = try await handlers.putInstallation(
                PutInstallationRequest(hub: "h", installationID: "p", json: Self.installation("p", tags: ["a"])),
                context: Self.context)
            func patch(_ id: String, _ text: String) async -> StatusCode? {
                await statusCode {
                    try await handlers.patchInstallation(
                        PatchInstallationRequest(hub: "h", installationID: id, patch: Array(text.utf8)),
                        context: Self.context)
                }
            }
            #expect(await patch("nope", #"[{"op":"add","path":"/tags","value":"b"}]"#) == .notFound)
            for bad in [
                "", "{}", #"[{"op":"move","path":"/tags"}]"#, #"[{"op":"add","path":"/installationId","value":"x"}]"#,
                #"[{"op":"add","path":"/tags","value":"b"},{"op":"add","path":"/tags","value":"bad tag!"}]"#,
            ] {
                #expect(await patch("p", bad) == .invalidArgument, "\(bad)")
            }
            let stored = try await handlers.getInstallation(
                GetInstallationRequest(hub: "h", installationID: "p"), context: Self.context)
            let object = try JSONSerialization.jsonObject(with: Data(stored.json)) as? [String: Any]
            #expect(object?["tags"] as? [String] == ["a"], "a refused patch left the installation as it was")
            #expect(await patch("p", #"[{"op":"add","path":"/tags","value":"b"}]"#) == nil)
        }
    }

    @Test(
        "installations typed: a PUT's message and a PATCH's operations are taken as NH's JSON is, and answered typed and as JSON"
    )
    func typedInstallations() async throws {
        try await Self.withHandlers { handlers in
            let read = try Installation.read(Self.installation("t1", tags: ["a"]), id: "t1")
            let put = try await handlers.putInstallation(
                PutInstallationRequest(hub: "h", installationID: "t1", installation: read.message),
                context: Self.context)
            let answered = try #require(put.installation)
            #expect(answered.installationID == "t1" && answered.tags == ["a"] && answered.lastUpdateUnixMs > 0)
            // A typed request gets no JSON back; the typed answer says what it said.
            #expect(put.json.isEmpty)
            let legacy = try await handlers.putInstallation(
                PutInstallationRequest(hub: "h", installationID: "t1", json: Self.installation("t1", tags: ["a"])),
                context: Self.context)
            #expect(try Installation(answer: try #require(legacy.installation)).json() == legacy.json)
            let patched = try await handlers.patchInstallation(
                PatchInstallationRequest(
                    hub: "h", installationID: "t1",
                    operations: try Installation.patchOperations(
                        Array(
                            #"[{"op":"add","path":"/tags","value":"b"},{"op":"add","path":"/userId","value":"u1"}]"#
                                .utf8))),
                context: Self.context)
            #expect(patched.installation?.tags == ["a", "b"] && patched.installation?.userID == "u1")
            #expect(patched.json.isEmpty)
            let got = try await handlers.getInstallation(
                GetInstallationRequest(hub: "h", installationID: "t1"), context: Self.context)
            #expect(got.installation == patched.installation)
            #expect(try Installation(answer: try #require(got.installation)).json() == got.json)
            let listed = try await handlers.listInstallations(
                ListInstallationsRequest(hub: "h", scope: .hub), context: Self.context)
            #expect(listed.items == [try #require(got.installation)] && listed.installations == [got.json])
            // A caller that needs nothing back (the edge) gets an empty answer; the writes are made.
            var quiet = try Installation.read(Self.installation("t2", tags: ["q"]), id: "t2").message
            quiet.userID = "u2"
            let emptyPut = try await handlers.putInstallation(
                PutInstallationRequest(hub: "h", installationID: "t2", installation: quiet, emptyAnswer: true),
                context: Self.context)
            let emptyPatch = try await handlers.patchInstallation(
                PatchInstallationRequest(
                    hub: "h", installationID: "t2",
                    operations: try Installation.patchOperations(
                        Array(#"[{"op":"add","path":"/tags","value":"r"}]"#.utf8)),
                    emptyAnswer: true),
                context: Self.context)
            #expect(emptyPut == InstallationResponse() && emptyPatch == InstallationResponse())
            let quietStored = try await handlers.getInstallation(
                GetInstallationRequest(hub: "h", installationID: "t2"), context: Self.context)
            #expect(quietStored.installation?.tags == ["q", "r"] && quietStored.installation?.userID == "u2")
            // Checked where they are stored, typed or not: a channel on a host the hub does not allow.
            var elsewhere = read.message
            elsewhere.platform = .wns
            elsewhere.pushChannel = "https://evil.example/channel"
            #expect(
                await statusCode {
                    try await handlers.putInstallation(
                        PutInstallationRequest(hub: "h", installationID: "t1", installation: elsewhere),
                        context: Self.context)
                } == .invalidArgument)
            // A message with another id than the path's, and an operation whose value is not JSON.
            #expect(
                await statusCode {
                    try await handlers.putInstallation(
                        PutInstallationRequest(hub: "h", installationID: "t2", installation: read.message),
                        context: Self.context)
                } == .invalidArgument)
            #expect(
                await statusCode {
                    try await handlers.patchInstallation(
                        PatchInstallationRequest(
                            hub: "h", installationID: "t1",
                            operations: [InstallationPatchOperation(op: "add", path: "/tags", valueJson: "{")]),
                        context: Self.context)
                } == .invalidArgument)
        }
    }

    @Test("handles checked for a direct send: at most 1,000, each by its platform's rules, the first bad one named")
    func checkHandles() async throws {
        try await Self.withHandlers { handlers in
            _ = try await handlers.checkHandles(
                CheckHandlesRequest(platform: .apns, handles: (0..<1000).map(Self.token)), context: Self.context)
            #expect(
                await statusCode {
                    try await handlers.checkHandles(
                        CheckHandlesRequest(platform: .apns, handles: (0..<1001).map(Self.token)), context: Self.context
                    )
                } == .invalidArgument)
            do {
                _ = try await handlers.checkHandles(
                    CheckHandlesRequest(
                        platform: .wns,
                        handles: ["https://x.notify.windows.com/?token=a", "https://evil.example/?token=a"]),
                    context: Self.context)
                Issue.record("a WNS channel on another host was taken")
            } catch let error as ServiceError {
                #expect(error.code == .invalidArgument && error.message.hasPrefix("device handle 2:"), "\(error)")
            }
            #expect(
                await statusCode {
                    try await handlers.checkHandles(
                        CheckHandlesRequest(platform: .apns, handles: [String(repeating: "a", count: 4097)]),
                        context: Self.context)
                } == .invalidArgument)
        }
    }

    @Test("tutorial calls name their owner; a handle is bounded; a dead handle's removal needs platform and handle")
    func tutorialCalls() async throws {
        try await Self.withHandlers { handlers in
            #expect(
                await statusCode {
                    try await handlers.createRegistrationId(CreateRegistrationIdRequest(), context: Self.context)
                } == .invalidArgument)
            #expect(
                await statusCode {
                    try await handlers.createRegistrationId(
                        CreateRegistrationIdRequest(owner: "u", handle: String(repeating: "a", count: 4097)),
                        context: Self.context)
                } == .invalidArgument)
            for request in [
                ListRegistrationsRequest(), ListRegistrationsRequest(owner: ""),
            ] {
                #expect(
                    await statusCode { try await handlers.listRegistrations(request, context: Self.context) }
                        == .invalidArgument)
            }
            #expect(
                await statusCode {
                    try await handlers.deleteRegistration(DeleteRegistrationRequest(), context: Self.context)
                }
                    == .invalidArgument)
            for request in [
                RemoveHandleRequest(handle: Self.token(1)), RemoveHandleRequest(platform: .apns),
            ] {
                #expect(
                    await statusCode { try await handlers.removeHandle(request, context: Self.context) }
                        == .invalidArgument)
            }
            let id = try await handlers.createRegistrationId(
                CreateRegistrationIdRequest(owner: "u", handle: Self.token(9)), context: Self.context
            ).registrationID
            _ = try await handlers.upsertRegistration(
                UpsertRegistrationRequest(owner: "u", registrationID: id, platform: .apns, handle: Self.token(9)),
                context: Self.context)
            #expect(
                try await handlers.removeHandle(
                    RemoveHandleRequest(platform: .apns, handle: Self.token(9)), context: Self.context
                ).removed == 1)
        }
    }

    @Test(
        "erase and export name one user and at most one hub, with bounded ids; the default hub is never deleted whole")
    func eraseBounds() async throws {
        try await Self.withHandlers { handlers in
            for (user, hub) in [
                ("", "h"), (String(repeating: "u", count: 257), "h"), ("u", String(repeating: "h", count: 257)),
            ] {
                #expect(
                    await statusCode {
                        try await handlers.listUserDevices(
                            ListUserDevicesRequest(user: user, hub: hub, limit: 10), context: Self.context)
                    } == .invalidArgument)
                #expect(
                    await statusCode {
                        try await handlers.eraseUserDevices(
                            EraseUserDevicesRequest(user: user, hub: hub), context: Self.context)
                    } == .invalidArgument)
            }
            #expect(
                await statusCode {
                    try await handlers.eraseUserDevices(
                        EraseUserDevicesRequest(user: "u", registrationIds: [String(repeating: "r", count: 257)]),
                        context: Self.context)
                } == .invalidArgument)
            #expect(
                await statusCode {
                    try await handlers.listUserDevices(
                        ListUserDevicesRequest(user: "u", limit: 10, after: String(repeating: "a", count: 257)),
                        context: Self.context)
                } == .invalidArgument)
            for limit: Int32 in [-1, 100_000] {
                #expect(
                    await statusCode {
                        try await handlers.exportUserDevices(
                            ExportUserRequest(user: "u", limit: limit), context: Self.context)
                    } == .invalidArgument)
            }
            for hub in ["", Names.defaultHub] {
                #expect(
                    await statusCode {
                        try await handlers.deleteHubDevices(DeleteHubDevicesRequest(hub: hub), context: Self.context)
                    } == .failedPrecondition)
            }
            _ = try await handlers.putInstallation(
                PutInstallationRequest(hub: "gone", installationID: "g", json: Self.installation("g")),
                context: Self.context)
            #expect(
                try await handlers.deleteHubDevices(DeleteHubDevicesRequest(hub: "gone"), context: Self.context).deleted
                    == 1)
        }
    }

    @Test(
        "the console's device list: its limit, its filters' sizes and a tag expression that does not parse are refused")
    func deviceListBounds() async throws {
        try await Self.withHandlers { handlers in
            for request in [
                ListDevicesRequest(hub: "h", limit: 501, scope: .hub),
                ListDevicesRequest(hub: "h", limit: -1, scope: .hub),
                ListDevicesRequest(hub: "h", user: String(repeating: "u", count: 257), scope: .hub),
                ListDevicesRequest(hub: "h", handlePrefix: String(repeating: "a", count: 4097), scope: .hub),
                ListDevicesRequest(hub: "h", afterID: String(repeating: "a", count: 257), scope: .hub),
                ListDevicesRequest(hub: "h", tag: "a && (b", scope: .hub),
            ] {
                #expect(
                    await statusCode { try await handlers.listDevices(request, context: Self.context) }
                        == .invalidArgument)
            }
            for n in 0..<3 {
                _ = try await handlers.putInstallation(
                    PutInstallationRequest(
                        hub: "h", installationID: "d\(n)",
                        json: Self.installation("d\(n)", token: n, tags: ["t\(n % 2)"])),
                    context: Self.context)
            }
            let first = try await handlers.listDevices(
                ListDevicesRequest(hub: "h", limit: 2, scope: .hub), context: Self.context)
            #expect(first.devices.count == 2 && !first.nextAfterID.isEmpty)
            #expect(first.devices.allSatisfy { $0.hub == "h" })
            let rest = try await handlers.listDevices(
                ListDevicesRequest(hub: "h", afterID: first.nextAfterID, limit: 2, scope: .hub), context: Self.context)
            #expect(rest.devices.count == 1 && rest.nextAfterID.isEmpty)
            let tagged = try await handlers.listDevices(
                ListDevicesRequest(hub: "h", tag: "t0", scope: .hub), context: Self.context)
            #expect(tagged.devices.count == 2)
        }
    }

    @Test("ResetForTests runs only in test mode")
    func reset() async throws {
        try await Self.withHandlers(testMode: false) { handlers in
            #expect(
                await statusCode { try await handlers.resetForTests(ResetForTestsRequest(), context: Self.context) }
                    == .failedPrecondition)
        }
        try await Self.withHandlers(testMode: true) { handlers in
            _ = try await handlers.putInstallation(
                PutInstallationRequest(hub: "h", installationID: "r", json: Self.installation("r")),
                context: Self.context)
            #expect(try await handlers.resetForTests(ResetForTestsRequest(), context: Self.context).deleted >= 1)
        }
    }
}
