import DispatchService
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Logging
import PushProviders
import Testing

/// herald-dispatch's RPC handlers as any gRPC client calls them, over a real outbox: bounds,
/// scopes and pages, answered with a status and a message. (Sends themselves are the Dispatcher's
/// and the stack's tests; the handlers here never call herald-registration, whose client points at
/// a socket nothing listens on.)
@Suite("dispatch handlers", .watchedForStalls)
struct DispatchHandlersTests {
    static let context = RPCContext(requestID: "dispatch", method: "test", logger: Logger(label: "test"))

    struct Fixture {
        let handlers: DispatchHandlers
        let outbox: Outbox
    }

    static func withHandlers(testMode: Bool = false, _ body: (Fixture) async throws -> Void) async throws {
        let db = try SQLiteDatabase.inMemory()
        let outbox = try Outbox(db: db)
        let inbox = try InboxProvider(db: db)
        let client = PushHTTP.makeClient(extraCAFile: nil)
        let registrations = RegistrationServiceClient(try RPCClient(socketPath: "/nonexistent/registration.sock"))
        let handlers = DispatchHandlers(
            dispatcher: Dispatcher(outbox: outbox, registrations: registrations), outbox: outbox, inbox: inbox,
            hubSenders: HubSenders(defaults: [.apns: inbox], inbox: inbox, client: client, timeout: .seconds(1)),
            credentials: HubCredentialStore(db: db), testMode: testMode)
        do {
            try await body(Fixture(handlers: handlers, outbox: outbox))
            try await client.shutdown()
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    @Test("hub-wide reads need READ_SCOPE_HUB; their limits and cursors are bounded")
    func hubReads() async throws {
        try await Self.withHandlers { f in
            let h = f.handlers
            let c = Self.context
            for scope in [ReadScope.unspecified, .handle, .all] {
                #expect(
                    await statusCode { try await h.listSends(ListSendsRequest(hub: "h", scope: scope), context: c) }
                        == .permissionDenied)
                #expect(
                    await statusCode { try await h.sendStats(SendStatsRequest(hub: "h", scope: scope), context: c) }
                        == .permissionDenied)
                #expect(
                    await statusCode { try await h.getHubQueue(GetHubQueueRequest(hub: "h", scope: scope), context: c) }
                        == .permissionDenied)
            }
            for request in [
                ListSendsRequest(hub: "h", limit: 201, scope: .hub), ListSendsRequest(hub: "h", limit: -1, scope: .hub),
                ListSendsRequest(hub: "h", beforeCreatedAtUnixMs: -5, scope: .hub),
            ] {
                #expect(await statusCode { try await h.listSends(request, context: c) } == .invalidArgument)
            }
            for minutes: Int32 in [-1, 1441] {
                #expect(
                    await statusCode {
                        try await h.sendStats(SendStatsRequest(hub: "h", minutes: minutes, scope: .hub), context: c)
                    }
                        == .invalidArgument)
            }
            let sends = try await h.listSends(ListSendsRequest(hub: "h", scope: .hub), context: c)
            let stats = try await h.sendStats(SendStatsRequest(hub: "h", minutes: 1440, scope: .hub), context: c)
            #expect(sends.sends.isEmpty && stats.minutes.isEmpty)
            let queue = try await h.getHubQueue(GetHubQueueRequest(hub: "h", scope: .hub), context: c)
            #expect(queue.pending == 0 && queue.oldestDueMs == 0)
            #expect(
                await statusCode {
                    try await h.getHubQueue(
                        GetHubQueueRequest(hub: String(repeating: "h", count: 257), scope: .hub), context: c)
                } == .invalidArgument)
        }
    }

    @Test(
        "a send's pages: negative limits and cursors are refused, a limit above 1,000 is 1,000; an unknown send is NOT_FOUND"
    )
    func sendPages() async throws {
        try await Self.withHandlers { f in
            let h = f.handlers
            let c = Self.context
            for request in [
                ListDeliveriesRequest(notificationID: "n-1", limit: -1, scope: .all),
                ListDeliveriesRequest(notificationID: "n-1", afterSequence: -1, scope: .all),
            ] {
                #expect(await statusCode { try await h.listDeliveries(request, context: c) } == .invalidArgument)
            }
            #expect(
                await statusCode {
                    try await h.listDeliveries(ListDeliveriesRequest(notificationID: "n-none", scope: .all), context: c)
                } == .notFound)
            for request in [
                ListInboxRequest(limit: -1), ListInboxRequest(afterSequence: -1),
                ListInboxRequest(newestFirst: true, beforeSequence: -1),
            ] {
                #expect(await statusCode { try await h.listInbox(request, context: c) } == .invalidArgument)
            }
            let inbox = try await h.listInbox(ListInboxRequest(limit: 100_000), context: c)
            #expect(inbox.entries.isEmpty)
            #expect(
                await statusCode { try await h.cancelScheduled(CancelScheduledRequest(scope: .all), context: c) }
                    == .invalidArgument)
            #expect(
                await statusCode {
                    try await h.cancelScheduled(CancelScheduledRequest(notificationID: "n-none", hub: "h"), context: c)
                } == .notFound)
        }
    }

    @Test("push limits: a hub named, limits not negative, a weight in range; read back with their use so far")
    func pushLimits() async throws {
        try await Self.withHandlers { f in
            let h = f.handlers
            let c = Self.context
            for limits in [
                HubPushLimits(hub: "", pushesPerDay: 1), HubPushLimits(hub: "h", pushesPerDay: -1),
                HubPushLimits(hub: "h", pushesPerMonth: -1), HubPushLimits(hub: "h", maxConcurrentPushes: -1),
                HubPushLimits(hub: "h", weight: -1), HubPushLimits(hub: "h", weight: Int64.max),
            ] {
                #expect(
                    await statusCode { try await h.setHubPushLimits(limits, context: c) } == .invalidArgument,
                    "\(limits)")
            }
            let set = try await h.setHubPushLimits(
                HubPushLimits(hub: "h", pushesPerDay: 10, pushesPerMonth: 100, maxConcurrentPushes: 4, weight: 3),
                context: c)
            #expect(
                set.pushesPerDay == 10 && set.pushesPerMonth == 100 && set.maxConcurrentPushes == 4 && set.weight == 3)
            #expect(set.pushesToday == 0 && set.pushesThisMonth == 0)
            let read = try await h.getHubPushLimits(GetHubPushLimitsRequest(hub: "h"), context: c)
            #expect(read == set)
            #expect(
                await statusCode { try await h.getHubPushLimits(GetHubPushLimitsRequest(hub: ""), context: c) }
                    == .invalidArgument)
        }
    }

    @Test(
        "credentials: a valid hub name and exactly one platform, checked before anything is stored; never answered back"
    )
    func credentials() async throws {
        try await Self.withHandlers { f in
            let h = f.handlers
            let c = Self.context
            let wns = ["client-id": "c", "client-secret": "s3cret", "token-url": "https://127.0.0.1:1/token"]
            for request in [
                try SetHubCredentialsRequest(hub: "bad hub!", platform: .wns, settings: wns),
                SetHubCredentialsRequest(hub: "h"),
            ] {
                #expect(await statusCode { try await h.setHubCredentials(request, context: c) } == .invalidArgument)
            }
            let before = try await h.getHubCredentials(GetHubCredentialsRequest(hub: "h"), context: c)
            #expect(before.platforms.allSatisfy { $0.source != .hub })
            let set = try await h.setHubCredentials(
                try SetHubCredentialsRequest(hub: "h", platform: .wns, settings: wns), context: c)
            let wnsStatus = try #require(set.platforms.first { $0.platform == .wns })
            #expect(wnsStatus.source == .hub && !wnsStatus.summary.contains("s3cret"))
            let deleted = try await h.deleteHubCredentials(
                DeleteHubCredentialsRequest(hub: "h", platform: .wns), context: c)
            #expect(deleted.platforms.first { $0.platform == .wns }?.source != .hub)
        }
    }

    @Test("erase and export: one user, bounded device lists and ids, cursors that are a page's own")
    func eraseAndExport() async throws {
        try await Self.withHandlers { f in
            let h = f.handlers
            let c = Self.context
            for request in [
                EraseUserRequest(user: ""), EraseUserRequest(user: String(repeating: "u", count: 257)),
                EraseUserRequest(user: "u", hub: String(repeating: "h", count: 257)),
            ] {
                #expect(await statusCode { try await h.eraseUser(request, context: c) } == .invalidArgument)
            }
            let many = (0...1000).map { UserDevice(registrationID: "r\($0)", platform: .apns, handle: "t") }
            #expect(
                await statusCode { try await h.eraseDevices(EraseDevicesRequest(devices: many), context: c) }
                    == .invalidArgument)
            for device in [
                UserDevice(registrationID: String(repeating: "r", count: 257), platform: .apns, handle: "t"),
                UserDevice(registrationID: "r", platform: .apns, handle: String(repeating: "t", count: 8193)),
            ] {
                #expect(
                    await statusCode { try await h.eraseDevices(EraseDevicesRequest(devices: [device]), context: c) }
                        == .invalidArgument)
            }
            let erased = try await h.eraseDevices(
                EraseDevicesRequest(devices: [UserDevice(registrationID: "r", platform: .apns, handle: "t")]),
                context: c)
            #expect(erased.removed == 0 && erased.redacted == 0)
            let tooMany = (0...ExportLimits.devicesPerCall).map { UserDevice(registrationID: "r\($0)") }
            for request in [
                ExportDeviceRecordsRequest(devices: tooMany),
                ExportDeviceRecordsRequest(devices: [UserDevice(registrationID: String(repeating: "r", count: 257))]),
                ExportDeviceRecordsRequest(devices: [UserDevice(registrationID: "r")], after: "x"),
                ExportDeviceRecordsRequest(devices: [UserDevice(registrationID: "r")], after: "-1"),
                ExportDeviceRecordsRequest(devices: [UserDevice(registrationID: "r")], limit: -1),
                ExportDeviceRecordsRequest(kind: .unrecognized(7), devices: [UserDevice(registrationID: "r")]),
            ] {
                #expect(await statusCode { try await h.exportDeviceRecords(request, context: c) } == .invalidArgument)
            }
            let empty = try await h.exportDeviceRecords(ExportDeviceRecordsRequest(), context: c)
            #expect(empty.items.isEmpty && empty.next.isEmpty)
            #expect(await statusCode { try await h.exportUser(ExportUserRequest(), context: c) } == .invalidArgument)
            let page = try await h.exportUser(ExportUserRequest(user: "nobody"), context: c)
            #expect(page.items.isEmpty && page.next.isEmpty)
        }
    }

    @Test("a hub's sends go only when it is named, never the default's; ResetForTests only in test mode")
    func deletes() async throws {
        try await Self.withHandlers { f in
            let h = f.handlers
            let c = Self.context
            #expect(
                await statusCode { try await h.deleteHubSends(DeleteHubSendsRequest(), context: c) } == .invalidArgument
            )
            #expect(
                await statusCode {
                    try await h.deleteHubSends(DeleteHubSendsRequest(hub: Names.defaultHub), context: c)
                }
                    == .failedPrecondition)
            _ = try await f.outbox.schedule(
                id: "n-later", sender: "s", targetUser: "u", targetTag: "", hub: "gone",
                fireAt: unixMillis() + 3_600_000,
                request: try SendRequest(targetUser: "u").serializedBytes())
            let deleted = try await h.deleteHubSends(DeleteHubSendsRequest(hub: "gone"), context: c)
            #expect(deleted.cancelled == 1)
            #expect(
                await statusCode { try await h.resetForTests(ResetForTestsRequest(), context: c) }
                    == .failedPrecondition
            )
        }
        try await Self.withHandlers(testMode: true) { f in
            _ = try await f.handlers.resetForTests(ResetForTestsRequest(), context: Self.context)
        }
    }
}
