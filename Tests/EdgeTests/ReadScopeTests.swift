import GRDB
import HeraldModel
import HeraldProto
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Logging
import RegistrationService
import Testing

@testable import Edge
@testable import HeraldRPC

/// A read's scope is checked where the data is read: herald-registration refuses a
/// hub-wide listing unless the request carries a scope that allows it, whatever the edge decided.
@Suite("read scopes", .watchedForStalls)
struct ReadScopeTests {
    static let context = RPCContext(requestID: "scope", method: "test", logger: Logger(label: "test"))

    @Test("a listing without a scope, or by an empty handle, is refused by herald-registration itself")
    func atTheDataOwner() async throws {
        let store = try await SQLRegistrationStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
        let handlers = RegistrationHandlers(store: store)
        let handle = String(repeating: "ab", count: 32)
        let cases: [(ListHubRegistrationsRequest, Bool)] = [
            (ListHubRegistrationsRequest(hub: "h"), false),
            (ListHubRegistrationsRequest(hub: "h", handle: handle), false),
            (ListHubRegistrationsRequest(hub: "h", scope: .handle), false),
            (ListHubRegistrationsRequest(hub: "h", tag: "news", scope: .handle), false),
            (ListHubRegistrationsRequest(hub: "h", scope: .unrecognized(9)), false),
            (ListHubRegistrationsRequest(hub: "h", handle: handle, scope: .handle), true),
            (ListHubRegistrationsRequest(hub: "h", scope: .hub), true),
        ]
        for (request, allowed) in cases {
            do {
                _ = try await handlers.listHubRegistrations(request, context: Self.context)
                #expect(allowed, "\(request.scope) handle=\(request.handle.isEmpty ? "none" : "set") was served")
            } catch let error as ServiceError {
                #expect(!allowed && error.code == .permissionDenied, "\(request.scope): \(error)")
            }
        }
        await #expect(throws: ServiceError.self) {
            try await handlers.listInstallations(ListInstallationsRequest(hub: "h"), context: Self.context)
        }
        _ = try await handlers.listInstallations(ListInstallationsRequest(hub: "h", scope: .hub), context: Self.context)
        // The console's device list and the NH export read the whole hub too.
        for scope in [ReadScope.unspecified, .handle, .unrecognized(9)] {
            await #expect(throws: ServiceError.self) {
                try await handlers.listDevices(ListDevicesRequest(hub: "h", scope: scope), context: Self.context)
            }
            await #expect(throws: ServiceError.self) {
                try await handlers.exportDevices(
                    ExportDevicesRequest(hub: "h", scope: scope), context: Self.context,
                    responses: ResponseStream { _ in Issue.record("an unscoped export sent a batch") })
            }
        }
        _ = try await handlers.listDevices(ListDevicesRequest(hub: "h", scope: .hub), context: Self.context)
        try await handlers.exportDevices(
            ExportDevicesRequest(hub: "h", scope: .hub), context: Self.context, responses: ResponseStream { _ in })
    }

    @Test("ReadScope.requireHub lets READ_SCOPE_HUB through, and nothing else")
    func requireHub() throws {
        try ReadScope.hub.requireHub("a read")
        for scope in [ReadScope.unspecified, .handle, .unrecognized(7)] {
            #expect(throws: ServiceError.self) { try scope.requireHub("a read") }
        }
    }

    @Test("the edge sets the scope from the rights auth verified: Manage reads the hub, Listen one handle at most")
    func fromVerifiedRights() {
        #expect(NotificationHubsRoutes.readScope([.listen, .manage], handle: nil) == .hub)
        #expect(NotificationHubsRoutes.readScope([.listen], handle: "abc") == .handle)
        #expect(NotificationHubsRoutes.readScope([.listen], handle: "") == .unspecified)
        #expect(NotificationHubsRoutes.readScope([.listen, .send], handle: nil) == .unspecified)
    }
}
