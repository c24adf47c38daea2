import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// `test-mode`, what docker-compose.test.yml turns on for other teams' integration tests: a known
/// user, the inbox over HTTP, and a reset between cases. And that nothing of it exists without it.
@Suite("test mode", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct TestModeTests {
    static let tester = "tester"
    static let testerPassword = "tester-Pa55word"

    static func withTestStack(_ body: (LiveStack) async throws -> Void) async throws {
        try await LiveStack.with(auth: .accounts) { configuration in
            for service in Stack.services {
                configuration.extraArguments[service, default: []] += ["--test-mode", "true"]
            }
            configuration.extraArguments["auth", default: []] += [
                "--test-user", tester, "--test-password", testerPassword,
            ]
        } _: { live in
            try await body(live)
        }
    }

    @Test(
        "the test user logs in, /v1/test/inbox shows one device's pushes, /v1/test/reset empties every service but keeps the test user"
    )
    func inboxAndReset() async throws {
        try await Self.withTestStack { live in
            let auth = EdgeClient.basic(Self.tester, Self.testerPassword)
            let handle = apnsToken(41)
            let created = try await live.edge.request("POST", "/api/register?handle=\(handle)", authorization: auth)
            #expect(created.status == 200, "\(created.text)")
            let id = try #require(
                try JSONSerialization.jsonObject(with: created.body, options: .fragmentsAllowed) as? String)
            let put = try await live.edge.request(
                "PUT", "/api/register/\(id)", authorization: auth,
                body: #"{"Platform":"apns","Handle":"\#(handle)","Tags":[]}"#)
            #expect(put.status == 200, "\(put.text)")
            let other = apnsToken(42)
            _ = try await live.edge.request("POST", "/api/register?handle=\(other)", authorization: auth)
            #expect(try await live.edge.request("POST", "/api/notifications", authorization: auth).status == 200)

            // Polled with a deadline: delivery to the inbox happens after the send is answered.
            var entries: [[String: Any]] = []
            let deadline = ContinuousClock.now + .seconds(10)
            while entries.isEmpty, ContinuousClock.now < deadline {
                let inbox = try await live.edge.request("GET", "/v1/test/inbox?handle=\(handle)")
                #expect(inbox.status == 200, "\(inbox.text)")
                entries = try #require(try inbox.json()["entries"] as? [[String: Any]])
                if entries.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
            }
            try #require(entries.count == 1, "nothing reached the inbox for the device")
            #expect(entries[0]["handle"] as? String == handle)
            #expect(entries[0]["platform"] as? String == "apns")
            let payload = try #require(entries[0]["payload"] as? String)
            let secureID = try #require(payload.firstMatch(of: /"secureId":"(\d+)"/)?.1, "\(payload)")
            #expect(
                try await live.edge.request("GET", "/api/notifications/\(secureID)", authorization: auth).status == 200)
            let empty = try await live.edge.request("GET", "/v1/test/inbox?handle=\(other)")
            #expect(try #require(try empty.json()["entries"] as? [Any]).isEmpty)

            let reset = try await live.edge.request("POST", "/v1/test/reset")
            #expect(reset.status == 200, "\(reset.text)")
            let deleted = try #require(try reset.json()["deleted"] as? [String: Int])
            #expect(
                deleted["registration"]! >= 1 && deleted["payload"]! == 1 && deleted["dispatch"]! >= 1
                    && deleted["auth"]! >= 1)

            let after = try await live.edge.request("GET", "/v1/test/inbox?handle=\(handle)")
            #expect(try #require(try after.json()["entries"] as? [Any]).isEmpty)
            // The registration and the content are gone; the test user is there again.
            let gone = try await live.edge.request(
                "PUT", "/api/register/\(id)", authorization: auth,
                body: #"{"Platform":"apns","Handle":"\#(handle)","Tags":[]}"#)
            #expect(gone.status == 410)
            #expect(
                try await live.edge.request("GET", "/api/notifications/\(secureID)", authorization: auth).status == 404)
            #expect(
                try await live.edge.request("POST", "/api/register?handle=\(handle)", authorization: auth).status == 200
            )
            // The test user may send to any tag (it holds Send on the hub default), after a reset too.
            let alert = try await live.edge.request(
                "POST", "/v1/notifications?kind=alert&to_tag=scores", authorization: auth, bytes: Data("Goal!".utf8),
                contentType: "text/plain")
            #expect(alert.status == 202, "\(alert.text)")
        }
    }

    @Test(
        "without test-mode: /v1/test/* is 404 naming the setting, every ResetForTests is FAILED_PRECONDITION, and test-user is refused"
    )
    func offByDefault() async throws {
        try await LiveStack.with(auth: .accounts, users: ["alice"]) { live in
            for (method, path) in [("GET", "/v1/test/inbox?handle=\(apnsToken(1))"), ("POST", "/v1/test/reset")] {
                let reply = try await live.edge.request(method, path)
                #expect(reply.status == 404)
                #expect(reply.text.contains("test-mode"), "\(reply.text)")
            }
            for service in ["auth", "registration", "payload", "dispatch"] {
                let error = await #expect(throws: ServiceError.self) {
                    try await RPCClient.with(
                        socketPath: live.configuration.socketPath(service), transport: .lean, timeout: .testRPC
                    ) {
                        client in
                        switch service {
                        case "auth": _ = try await AuthServiceClient(client).resetForTests(ResetForTestsRequest())
                        case "registration":
                            _ = try await RegistrationServiceClient(client).resetForTests(ResetForTestsRequest())
                        case "payload": _ = try await PayloadServiceClient(client).resetForTests(ResetForTestsRequest())
                        default: _ = try await DispatchServiceClient(client).resetForTests(ResetForTestsRequest())
                        }
                    }
                }
                #expect(error?.code == .failedPrecondition)
                #expect(error?.message.contains("test-mode") == true, "\(String(describing: error))")
            }
            // alice is still there.
            #expect(
                try await live.edge.request("POST", "/api/register?handle=\(apnsToken(2))", as: "alice").status == 200)

            let refused = try await runProgram(
                live.configuration.binDirectory + "/herald-auth",
                [
                    "--runtime-dir", live.configuration.directory + "/other", "--test-user", "tester",
                    "--test-password", Self.testerPassword,
                ])
            #expect(refused.status == 2)
            #expect(refused.error.contains("test-user") && refused.error.contains("test-mode"), "\(refused.error)")
        }
    }
}
