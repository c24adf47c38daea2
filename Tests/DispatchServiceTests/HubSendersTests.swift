import DispatchService
import GRDB
import HeraldModel
import HeraldProto
import Logging
import PushProviders
import Testing

/// Hubs' senders as replicas refresh them from the shared store, beside the RPCs that change them.
@Suite("hub senders")
struct HubSendersTests {
    static let wns = PlatformCredentials.wns(clientID: "c", clientSecret: "s", tokenURL: "https://127.0.0.1:1/token")

    static func stored(_ hub: String, updatedAt: Int64)
        -> [(hub: String, platform: Platform, settings: [String: String], updatedAt: Int64)]
    {
        [(hub, .wns, ["client-id": "c", "client-secret": "s", "token-url": "https://127.0.0.1:1/token"], updatedAt)]
    }

    static func withSenders(_ body: (HubSenders) async throws -> Void) async throws {
        let client = PushHTTP.makeClient(extraCAFile: nil)
        let inbox = try InboxProvider(db: .inMemory())
        let senders = HubSenders(defaults: [.wns: inbox], inbox: inbox, client: client, timeout: .seconds(1))
        do {
            try await body(senders)
            try await client.shutdown()
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// The CI failure this pins: a periodic refresh read the store just before an RPC stored a
    /// hub's APNs key, and then removed the sender that RPC had put in place; the next send went
    /// to the inbox instead of APNs.
    @Test("a refresh of a snapshot read before an RPC's change leaves that change as it is")
    func staleSnapshots() async throws {
        try await Self.withSenders { senders in
            let logger = Logger(label: "test")
            // Set by an RPC while a refresh's read of the store (which did not see it yet) was under way.
            let readStarted = ContinuousClock.now
            let sender = try await senders.prepare(hub: "shop", Self.wns)
            senders.install(hub: "shop", Self.wns, sender, updatedAt: 7, changedHere: true)
            await senders.load([], readSince: readStarted, logger: logger)
            #expect(senders.sender(hub: "shop", platform: .wns) is WNSSender, "the refresh undid the RPC's set")
            // A snapshot read after the change is believed: the row is gone from the store.
            await senders.load([], readSince: ContinuousClock.now, logger: logger)
            #expect(senders.sender(hub: "shop", platform: .wns) is InboxProvider)

            // Removed by an RPC while a refresh read a snapshot that still had the row.
            await senders.load(Self.stored("shop", updatedAt: 8), readSince: ContinuousClock.now, logger: logger)
            #expect(senders.sender(hub: "shop", platform: .wns) is WNSSender)
            let readStartedAgain = ContinuousClock.now
            senders.remove(hub: "shop", platform: .unspecified)
            await senders.load(Self.stored("shop", updatedAt: 9), readSince: readStartedAgain, logger: logger)
            #expect(
                senders.sender(hub: "shop", platform: .wns) is InboxProvider, "the refresh brought back removed keys")
        }
    }
}
