import Crypto
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldStack
import HeraldTestSupport
import NotificationHubs
import StackTestSupport
import Testing

/// The edge's reuse of auth's SAS verdicts, seen in its own `/metrics` (a registry per process)
/// while the `herald` CLI rotates and narrows keys from a process of its own.
@Suite(
    "Notification Hubs: the edge's reuse of SAS verdicts, read from its own metrics", .serialized,
    .timeLimit(.minutes(3)), .watchedForStalls)
struct SASVerdictCacheTests {
    @Test(
        "the edge reuses auth's answer for a SAS token on what its sr covers, until a key changes: a rotated or narrowed key holds from the next request"
    )
    func sasVerdictCache() async throws {
        // Set explicitly so that the PostgreSQL pass (default 0 there) runs it too: the stack is on one host.
        try await LiveStack.with(
            runner: .processes, configure: { $0.extraArguments["auth"] = ["--verdict-cache-seconds", "60"] }
        ) {
            live in
            let edge = live.edge
            let hub = try await NHFixture.hub("cachedhub", live)
            let herald = live.configuration.binDirectory + "/herald"
            let dir = ["--runtime-dir", live.configuration.runtimeDirectory]
            func verdicts(_ source: String) async throws -> Double {
                StackFixture.value(
                    try await edge.request("GET", "/metrics").text, "herald_edge_auth_verdicts_total",
                    ["source=\"\(source)\""])
            }
            func put(_ id: String, _ token: String) async throws -> Int {
                try await edge.request(
                    "PUT", "/cachedhub/installations/\(id)", authorization: token,
                    body: #"{"installationId":"\#(id)","platform":"fcmv1","pushChannel":"fcm-\#(id)"}"#
                ).status
            }
            let hubToken = NHFixture.token(sr: NHFixture.root(live) + "cachedhub", hub.full)
            // One token, five resources: auth is asked once.
            let (cachedBefore, askedBefore) = (try await verdicts("cache"), try await verdicts("auth"))
            for index in 0..<5 { #expect(try await put("i\(index)", hubToken) == 200) }
            #expect(try await verdicts("cache") - cachedBefore == 4)
            #expect(try await verdicts("auth") - askedBefore == 1)

            // A token for one installation only: its reused answer covers that one, never another.
            let narrow = NHFixture.token(sr: NHFixture.root(live) + "cachedhub/installations/i1", hub.full)
            #expect(try await put("i1", narrow) == 200)
            #expect(try await put("i1", narrow) == 200)
            #expect(try await put("i2", narrow) == 401)

            // Narrowing the key to Listen: the cached Manage answer is gone with the next request.
            #expect(try await edge.request("GET", "/cachedhub/installations", authorization: hubToken).status == 200)
            let listen = try await runProgram(
                herald, ["hubs", "key", "set", "cachedhub", "DefaultFullSharedAccessSignature", "Listen"] + dir)
            try #require(listen.status == 0, "\(listen.error)")
            #expect(try await edge.request("GET", "/cachedhub/installations", authorization: hubToken).status == 401)
            #expect(try await put("i3", hubToken) == 200, "Listen may still write an installation")
            // Rotating the secret the token was signed with: refused at once.
            let rotated = try await runProgram(
                herald, ["hubs", "key", "rotate", "cachedhub", "DefaultFullSharedAccessSignature", "primary"] + dir)
            try #require(rotated.status == 0, "\(rotated.error)")
            #expect(try await put("i4", hubToken) == 401)
        }
    }
}
