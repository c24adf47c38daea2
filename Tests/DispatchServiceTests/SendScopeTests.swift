import HeraldModel
import HeraldProto
import HeraldTestSupport
import Synchronization
import Testing

@testable import DispatchService

/// Whose send a read of one send may see, checked where the outbox reads it: a request that names
/// no requester and no hub is refused unless it asks for READ_SCOPE_ALL, and a narrower scope finds
/// another user's or hub's send as it finds an unknown id.
@Suite("send scopes", .watchedForStalls)
struct SendScopeTests {
    @Test(
        "a request's fields: requester first, then hub, then hubs, then READ_SCOPE_ALL; naming none is PERMISSION_DENIED"
    )
    func fromRequests() throws {
        #expect(try SendScope(requester: "lee", hub: "", scope: .unspecified) == .sender("lee", hub: ""))
        #expect(try SendScope(requester: "lee", hub: "h", hubs: ["a"], scope: .all) == .sender("lee", hub: "h"))
        #expect(try SendScope(requester: "", hub: "h", hubs: ["a"], scope: .all) == .hub("h"))
        #expect(try SendScope(requester: "", hub: "", hubs: ["a", "b", "a"], scope: .all) == .hubs(["a", "b"]))
        #expect(try SendScope(requester: "", hub: "", hubs: ["a"], scope: .unspecified) == .hubs(["a"]))
        #expect(try SendScope(requester: "", hub: "", scope: .all) == .everyHub)
        // A list of hubs is bounded, and an empty id in it would be no hub at all.
        for hubs in [[""], ["a", ""], (0...SendScope.maxHubs).map { "h\($0)" }] {
            let error = #expect(throws: ServiceError.self) {
                try SendScope(requester: "", hub: "", hubs: hubs, scope: .all)
            }
            #expect(error?.code == .invalidArgument, "\(hubs.count) hubs")
        }
        #expect(
            try SendScope(requester: "", hub: "", hubs: (1...SendScope.maxHubs).map { "h\($0)" }, scope: .unspecified)
                .admits(sender: "x", hub: "h1000"))
        for scope in [ReadScope.unspecified, .hub, .handle, .unrecognized(9)] {
            let error = #expect(throws: ServiceError.self) { try SendScope(requester: "", hub: "", scope: scope) }
            #expect(error?.code == .permissionDenied, "\(scope)")
        }
    }

    @Test("what each scope admits")
    func admits() {
        #expect(SendScope.sender("lee", hub: "").admits(sender: "lee", hub: "any"))
        #expect(!SendScope.sender("lee", hub: "").admits(sender: "key:Full", hub: "any"))
        #expect(!SendScope.sender("lee", hub: "h").admits(sender: "lee", hub: "other"))
        #expect(SendScope.hub("h").admits(sender: "anyone", hub: "h"))
        #expect(!SendScope.hub("h").admits(sender: "anyone", hub: "h2"))
        #expect(!SendScope.hub("").admits(sender: "x", hub: "h"))
        #expect(SendScope.hubs(["h", "h3"]).admits(sender: "anyone", hub: "h3"))
        #expect(!SendScope.hubs(["h", "h3"]).admits(sender: "anyone", hub: "h2"))
        #expect(!SendScope.hubs(["h"]).admits(sender: "anyone", hub: ""))
        #expect(SendScope.everyHub.admits(sender: "", hub: ""))
    }

    @Test("the outbox's reads of a send: outcome, deliveries and cancel find it only in scope, else NOT_FOUND")
    func outboxReads() async throws {
        let outbox = try Outbox(db: .inMemory(), now: { 1_000 })
        _ = try await outbox.schedule(
            id: "n-s", sender: "lee", targetUser: "u", targetTag: "", hub: "h1", fireAt: 5_000,
            request: try SendRequest(targetUser: "u").serializedBytes())
        let inScope: [SendScope] = [
            .sender("lee", hub: ""), .sender("lee", hub: "h1"), .hub("h1"), .hubs(["h2", "h1"]), .everyHub,
        ]
        let outOfScope: [SendScope] = [
            .sender("ann", hub: ""), .sender("lee", hub: "h2"), .hub("h2"), .hub(""), .hubs(["h2", "h3"]),
        ]
        for scope in inScope {
            #expect(try await outbox.outcome(of: "n-s", scope: scope).hub == "h1", "\(scope)")
            #expect(try await outbox.deliveries(of: "n-s", scope: scope, after: 0, limit: 10).isEmpty)
        }
        for scope in outOfScope {
            let outcome = await #expect(throws: ServiceError.self) { try await outbox.outcome(of: "n-s", scope: scope) }
            #expect(outcome?.code == .notFound, "\(scope)")
            let deliveries = await #expect(throws: ServiceError.self) {
                try await outbox.deliveries(of: "n-s", scope: scope, after: 0, limit: 10)
            }
            #expect(deliveries?.code == .notFound, "\(scope)")
            let cancel = await #expect(throws: ServiceError.self) {
                try await outbox.cancelScheduled("n-s", scope: scope)
            }
            #expect(cancel?.code == .notFound, "\(scope)")
        }
        // Out of scope, the send was left as it was.
        #expect(try await outbox.outcome(of: "n-s", scope: .everyHub).state == .scheduled)
        #expect(try await outbox.cancelScheduled("n-s", scope: .hub("h1")).state == .cancelled)
    }
}
