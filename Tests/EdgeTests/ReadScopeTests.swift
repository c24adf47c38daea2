import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import Logging
import RegistrationService
import Testing

@testable import Edge

/// A read's scope is checked where the data is read (issue 47): herald-registration refuses a
/// hub-wide listing unless the request carries a scope that allows it, whatever the edge decided.
@Suite("read scopes")
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
    }

    @Test("the edge sets the scope from the rights auth verified: Manage reads the hub, Listen one handle at most")
    func fromVerifiedRights() {
        #expect(NotificationHubsRoutes.readScope([.listen, .manage], handle: nil) == .hub)
        #expect(NotificationHubsRoutes.readScope([.listen], handle: "abc") == .handle)
        #expect(NotificationHubsRoutes.readScope([.listen], handle: "") == .unspecified)
        #expect(NotificationHubsRoutes.readScope([.listen, .send], handle: nil) == .unspecified)
    }
}
