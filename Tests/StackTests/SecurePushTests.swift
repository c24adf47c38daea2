import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// The tutorial's secure push, replayed over HTTP against the five real services (in this process:
/// StackTestSupport's InProcessStack). The services
/// talk to each other over the lean protocol and, in a second run of each flow, over gRPC; the
/// contract's sequence and status codes also run in both auth modes.
@Suite("secure push end to end", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct SecurePushTests {
    @Test(
        "the iOS client's sequence: register, send, fetch once unread then read; only the recipient",
        arguments: RPCTransport.allCases, AuthModeCase.allCases)
    func tutorialSequence(_ transport: RPCTransport, _ auth: AuthModeCase) async throws {
        try await LiveStack.with(auth: auth, users: ["alice", "bob"], configure: { $0.rpcTransport = transport }) {
            live in
            try await StackFixture.secureSequence(live)
        }
    }

    @Test(
        "the edge answers the contract's status codes and never 500", arguments: RPCTransport.allCases,
        AuthModeCase.allCases)
    func statusCodes(_ transport: RPCTransport, _ auth: AuthModeCase) async throws {
        try await LiveStack.with(auth: auth, users: ["alice", "bob"], configure: { $0.rpcTransport = transport }) {
            live in
            let edge = live.edge
            let token = apnsToken(2)
            let id = try #require(
                try JSONSerialization.jsonObject(
                    with: try await edge.request("POST", "/api/register", as: "alice").body, options: .fragmentsAllowed)
                    as? String)
            let body = #"{"Platform":"apns","Handle":"\#(token)"}"#

            #expect(try await edge.request("PUT", "/api/register/\(id)", as: "bob", body: body).status == 410)
            #expect(try await edge.request("DELETE", "/api/register/\(id)", as: "bob").status == 404)
            #expect(try await edge.request("PUT", "/api/register/r-unknown", as: "alice", body: body).status == 410)
            #expect(
                try await edge.request(
                    "PUT", "/api/register/\(id)", as: "alice",
                    body: #"{"Platform":"apns","Handle":"\#(token)","Tags":["username:bob"]}"#
                ).status == 400)
            #expect(
                try await edge.request(
                    "PUT", "/api/register/\(id)", as: "alice", body: #"{"Platform":"mpns","Handle":"x"}"#
                )
                .status == 400)
            #expect(
                try await edge.request(
                    "PUT", "/api/register/\(id)", as: "alice", body: #"{"Platform":"apns","Handle":"zz"}"#
                )
                .status == 400)
            #expect(try await edge.request("PUT", "/api/register/\(id)", as: "alice", body: "not json").status == 400)
            #expect(
                try await edge.request(
                    "PUT", "/api/register/\(id)", as: "alice", body: #"{"platform":"GCM","handle":"fcm-1"}"#
                )
                .status == 200)
            #expect(try await edge.request("DELETE", "/api/register/\(id)", as: "alice").status == 200)
            #expect(try await edge.request("PUT", "/api/register/\(id)", as: "alice", body: body).status == 410)

            for authorization in ["Basic", "Basic !!!", EdgeClient.basic("alice", "wrong"), "Bearer x", "Digest y"] {
                let reply = try await edge.request("POST", "/api/register", authorization: authorization)
                #expect(reply.status == 401, "\(authorization)")
                #expect(reply.header("WWW-Authenticate") != nil)
            }
            #expect(try await edge.request("GET", "/api/notifications/abc", as: "alice").status == 404)
            #expect(try await edge.request("GET", "/api/notifications/999999", as: "alice").status == 404)
            #expect(try await edge.request("GET", "/no/such/route").status == 404)
        }
    }

    @Test("herald inbox --json shows what the inbox provider recorded")
    func inboxCommand() async throws {
        try await LiveStack.with { live in
            let token = apnsToken(4)
            let id = try #require(
                try JSONSerialization.jsonObject(
                    with: try await live.edge.request("POST", "/api/register", as: "fay").body,
                    options: .fragmentsAllowed)
                    as? String)
            _ = try await live.edge.request(
                "PUT", "/api/register/\(id)", as: "fay", body: #"{"Platform":"apns","Handle":"\#(token)"}"#)
            _ = try await live.edge.request("POST", "/api/notifications", as: "fay")
            _ = try await live.waitForInbox { $0.handle == token }
            let herald = live.configuration.binDirectory + "/herald"
            let result = try await runProgram(herald, ["inbox", "--dir", live.configuration.directory, "--json"])
            #expect(result.status == 0, "\(result.error)")
            let entries = try #require(
                try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String: Any]])
            let entry = try #require(entries.first { $0["handle"] as? String == token })
            #expect(entry["platform"] as? String == "apns")
            #expect((entry["headers"] as? [String: String])?["apns-push-type"] == "background")
            #expect((entry["payload"] as? String)?.hasPrefix(#"{"aps":{"content-available":1},"secureId":""#) == true)
        }
    }
}
