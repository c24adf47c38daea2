import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// The edge's reuse of auth's user verdicts, seen in its own `/metrics` (a registry per process)
/// while the `herald` CLI changes accounts from a process of its own.
@Suite(
    "accounts: the edge's reuse of auth's verdicts, read from its own metrics", .serialized, .timeLimit(.minutes(5)),
    .watchedForStalls)
struct UserVerdictCacheTests {
    @Test(
        "the edge reuses auth's verdicts, yet a revocation, password change, grant or lockout holds from the next request"
    )
    func verdictCache() async throws {
        try await LiveStack.with(
            runner: .processes,
            auth: .accounts,
            configure: {
                // Set explicitly so that the PostgreSQL pass (default 0 there) runs it too: the stack is on one host.
                $0.extraArguments["auth"] = [
                    "--password-hash-log-n", "10", "--max-failed-logins", "3", "--lockout-seconds", "60",
                    "--verdict-cache-seconds", "60",
                ]
            }
        ) { live in
            let edge = live.edge
            let herald = live.configuration.binDirectory + "/herald"
            let run = live.configuration.runtimeDirectory
            func verdicts(_ source: String) async throws -> Double {
                StackFixture.value(
                    try await edge.request("GET", "/metrics").text, "herald_edge_auth_verdicts_total",
                    ["source=\"\(source)\""])
            }
            func status(_ authorization: String, _ path: String = "/api/notifications/1") async throws -> Int {
                try await edge.request("GET", path, authorization: authorization).status
            }
            try await live.addUser("frank", password: "frank's password", send: false)
            let basic = EdgeClient.basic("frank", "frank's password")
            // The first request asks auth; the next four reuse its answer (404: no such notification, after auth).
            let (cachedBefore, askedBefore) = (try await verdicts("cache"), try await verdicts("auth"))
            for _ in 0..<5 { #expect(try await status(basic) == 404) }
            #expect(try await verdicts("cache") - cachedBefore == 4)
            #expect(try await verdicts("auth") - askedBefore == 1)

            // An operator's revocation through the CLI reaches auth, never the edge; the next request is refused.
            let token = try #require(
                try await edge.request("POST", "/v1/auth/token", authorization: basic).json()["access_token"] as? String
            )
            for _ in 0..<3 { #expect(try await status("Bearer \(token)") == 404) }
            let revoked = try await runProgram(herald, ["tokens", "revoke", "frank", "--runtime-dir", run])
            #expect(revoked.status == 0, "\(revoked.error)")
            #expect(try await status("Bearer \(token)") == 401)

            // A grant: the cached principal had no Send; the next send has it.
            let body = Data("hello".utf8)
            func sendToTag() async throws -> Int {
                try await edge.request(
                    "POST", "/v1/notifications?kind=alert&to_tag=news", authorization: basic, bytes: body,
                    contentType: "text/plain"
                )
                .status
            }
            #expect(try await sendToTag() == 403)
            #expect(try await sendToTag() == 403)
            let granted = try await runProgram(
                herald, ["hubs", "grant", "default", "frank", "Send", "--runtime-dir", run])
            #expect(granted.status == 0, "\(granted.error)")
            #expect(try await sendToTag() == 202)

            // A password change: the old password, verified a moment ago, is refused at once.
            #expect(try await status(basic) == 404)
            let changed = try await runProgram(
                herald, ["users", "passwd", "frank", "--runtime-dir", run], input: "frank's new password\n")
            #expect(changed.status == 0, "\(changed.error)")
            #expect(try await status(basic) == 401)
            let renewed = EdgeClient.basic("frank", "frank's new password")
            #expect(try await status(renewed) == 404)
            #expect(try await status(renewed) == 404)

            // A lockout stops the cached right password too, as it does without the cache.
            for _ in 0..<3 { #expect(try await status(EdgeClient.basic("frank", "a guess")) == 401) }
            #expect(try await status(renewed) == 429)
        }
    }
}
