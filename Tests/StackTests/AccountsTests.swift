import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// herald-auth's accounts mode through the edge and the `herald` CLI, and `herald device`.
@Suite("accounts and the herald CLI end to end", .serialized, .timeLimit(.minutes(5)), .watchedForStalls)
struct AccountsTests {
    @Test(
        "the CLI finds the sockets through HERALD_RUNTIME_DIR as the services do; flags win; a missing socket names its path and setting"
    )
    func runtimeDirFromEnvironment() async throws {
        try await LiveStack.with(
            auth: .accounts, configure: { $0.extraArguments["auth"] = ["--password-hash-log-n", "10"] }
        ) { live in
            let herald = live.configuration.binDirectory + "/herald"
            let run = live.configuration.runtimeDirectory
            let added = try await runProgram(
                herald, ["users", "add", "erin"], input: "pw erin 123\n", environment: ["HERALD_RUNTIME_DIR": run])
            #expect(added.status == 0, "\(added.error)")
            #expect(
                try await runProgram(herald, ["users", "list"], environment: ["HERALD_RUNTIME_DIR": run]).output
                    .contains("erin"))

            // A wrong environment: the error names the socket it looked for and where that came from.
            let wrong = try await runProgram(
                herald, ["users", "list"], environment: ["HERALD_RUNTIME_DIR": "/nonexistent/run"])
            #expect(wrong.status != 0)
            #expect(
                wrong.error.contains("/nonexistent/run/auth.sock") && wrong.error.contains("HERALD_RUNTIME_DIR"),
                "\(wrong.error)")
            // Flags win over it.
            let flagged = try await runProgram(
                herald, ["users", "list", "--dir", live.configuration.directory],
                environment: ["HERALD_RUNTIME_DIR": "/nonexistent/run"])
            #expect(flagged.output.contains("erin"), "\(flagged.error)")
            let runtimeFlag = try await runProgram(
                herald, ["users", "list", "--runtime-dir", "/elsewhere"], environment: ["HERALD_RUNTIME_DIR": run])
            #expect(
                runtimeFlag.error.contains("/elsewhere/auth.sock") && runtimeFlag.error.contains("--runtime-dir"),
                "\(runtimeFlag.error)")
        }
    }

    @Test("accounts: users from the CLI, Basic and bearer, revocation, lockout; no secret in any log line")
    func accounts() async throws {
        try await LiveStack.with(
            auth: .accounts,
            configure: {
                $0.logLevel = "trace"
                $0.extraArguments["auth"] = [
                    "--password-hash-log-n", "10", "--max-failed-logins", "3", "--lockout-seconds", "60",
                ]
            }
        ) { live in
            let edge = live.edge
            let herald = live.configuration.binDirectory + "/herald"
            let dir = live.configuration.directory
            let password = "s3cret horse \(UUID().uuidString.prefix(8))"
            let added = try await runProgram(herald, ["users", "add", "alice", "--dir", dir], input: password + "\n")
            #expect(added.status == 0, "\(added.error)")
            let duplicate = try await runProgram(
                herald, ["users", "add", "alice", "--dir", dir], input: "another password\n")
            #expect(duplicate.status != 0)
            #expect(duplicate.error.contains("ALREADY_EXISTS"))
            #expect(try await runProgram(herald, ["users", "list", "--dir", dir]).output.contains("alice"))

            // Basic: only the real password; the tutorial's user == password is not accepted here.
            let basic = EdgeClient.basic("alice", password)
            #expect(try await edge.request("POST", "/api/register", authorization: basic).status == 200)
            for wrong in [
                EdgeClient.basic("alice", "alice"), EdgeClient.basic("alice", "nope"),
                EdgeClient.basic("nobody", password),
            ] {
                let reply = try await edge.request("POST", "/api/register", authorization: wrong)
                #expect(reply.status == 401)
                #expect(reply.header("WWW-Authenticate") == #"Basic realm="herald""#)
            }

            // Bearer tokens: issued, used, revoked by the client, and by an operator.
            let issued = try await edge.request("POST", "/v1/auth/token", authorization: basic)
            #expect(issued.status == 200)
            let body = try issued.json()
            let token = try #require(body["access_token"] as? String)
            #expect(body["token_type"] as? String == "Bearer")
            #expect((body["expires_in"] as? Int).map { (3500...3600).contains($0) } == true)
            #expect(issued.header("Cache-Control") == "no-store")
            let bearer = "Bearer \(token)"
            #expect(try await edge.request("POST", "/api/register", authorization: bearer).status == 200)
            #expect(try await edge.request("POST", "/v1/auth/token", authorization: bearer).status == 401)
            #expect(try await edge.request("DELETE", "/v1/auth/token", authorization: bearer).status == 204)
            #expect(try await edge.request("POST", "/api/register", authorization: bearer).status == 401)

            let second = try #require(
                try await edge.request("POST", "/v1/auth/token", authorization: basic).json()["access_token"] as? String
            )
            #expect(try await edge.request("POST", "/api/register", authorization: "Bearer \(second)").status == 200)
            let revoked = try await runProgram(herald, ["tokens", "revoke", "alice", "--dir", dir])
            #expect(revoked.output.contains("revoked 1 token"), "\(revoked.output) \(revoked.error)")
            #expect(try await edge.request("POST", "/api/register", authorization: "Bearer \(second)").status == 401)

            // A password change takes effect at once, cached credentials included.
            let newPassword = password + " v2"
            #expect(
                try await runProgram(herald, ["users", "passwd", "alice", "--dir", dir], input: newPassword + "\n")
                    .status == 0)
            #expect(try await edge.request("POST", "/api/register", authorization: basic).status == 401)
            #expect(
                try await edge.request("POST", "/api/register", authorization: EdgeClient.basic("alice", newPassword))
                    .status == 200)

            // Lockout: after three failures even the right password is refused for a while.
            try await live.addUser("carol", password: "carol's password")
            for _ in 0..<3 {
                #expect(
                    try await edge.request(
                        "GET", "/api/notifications/1", authorization: EdgeClient.basic("carol", "guess")
                    ).status == 401)
            }
            let locked = try await edge.request(
                "GET", "/api/notifications/1", authorization: EdgeClient.basic("carol", "carol's password"))
            #expect(locked.status == 429)
            #expect(locked.header("Retry-After").flatMap(Int.init).map { (1...60).contains($0) } == true)
            #expect(
                try await edge.request("POST", "/api/register", authorization: EdgeClient.basic("alice", newPassword))
                    .status == 200)

            // The flow still works with a token, end to end.
            let third = try #require(
                try await edge.request("POST", "/v1/auth/token", authorization: EdgeClient.basic("alice", newPassword))
                    .json()[
                        "access_token"] as? String)
            let handle = apnsToken(20)
            let id = try #require(
                try JSONSerialization.jsonObject(
                    with: try await edge.request(
                        "POST", "/api/register?handle=\(handle)", authorization: "Bearer \(third)"
                    ).body,
                    options: .fragmentsAllowed) as? String)
            #expect(
                try await edge.request(
                    "PUT", "/api/register/\(id)", authorization: "Bearer \(third)",
                    body: #"{"Platform":"apns","Handle":"\#(handle)"}"#
                ).status == 200)
            #expect(
                try await edge.request("POST", "/api/notifications", authorization: "Bearer \(third)").status == 200)
            let push = try #require(try await live.waitForInbox { $0.handle == handle }.first)
            let secureID = try #require(
                String(decoding: push.payload, as: UTF8.self).firstMatch(of: /"secureId":"(\d+)"/)?.1)
            let fetched = try await edge.request(
                "GET", "/api/notifications/\(secureID)", authorization: "Bearer \(third)")
            #expect(try fetched.json()["Payload"] as? String == "Secure confirmation.")

            // Nothing secret in any service's log, at trace level.
            let logs = live.logs()
            #expect(logs.contains("token issued"), "the logs were not captured")
            for secret in [password, newPassword, "carol's password", token, second, third]
                + [basic, bearer].map({ String($0.split(separator: " ")[1]) })
            {
                #expect(!logs.contains(secret), "a credential appears in the logs")
            }
        }
    }

    @Test("herald device plays the app: a rich push saved to a file, a secure push printed")
    func device() async throws {
        try await LiveStack.with(auth: .accounts, users: ["frank"]) { live in
            let out = live.configuration.directory + "/received"
            let output = live.configuration.directory + "/device.out"
            _ = FileManager.default.createFile(atPath: output, contents: nil)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: live.configuration.binDirectory + "/herald")
            process.arguments = [
                "device", "--dir", live.configuration.directory, "--user", "frank", "--out", out, "--count", "2",
                "--timeout", "60",
            ]
            process.environment = ["HERALD_PASSWORD": EdgeClient.password(of: "frank", in: .accounts)]
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
            try process.run()
            defer { if process.isRunning { process.terminate() } }
            func printed() -> String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }

            let deadline = ContinuousClock.now + .seconds(30)
            while !printed().contains("waiting for pushes"), process.isRunning, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            try #require(printed().contains("waiting for pushes"), "herald device did not register: \(printed())")

            let image = Data([0x89, 0x50, 0x4E, 0x47] + (0..<5000).map { UInt8($0 % 251) })
            let rich = try await live.edge.upload(
                "/v1/notifications?kind=rich&to_user=frank&message=Hello%20there", as: "frank", bytes: image,
                contentType: "image/png")
            #expect(rich.status == 202)
            let richID = try #require(try rich.json()["payloadId"] as? Int)
            #expect(try await live.edge.request("POST", "/api/notifications", as: "frank").status == 200)

            while process.isRunning, ContinuousClock.now < deadline + .seconds(30) {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(!process.isRunning)
            #expect(process.terminationStatus == 0, "\(printed())")
            let text = printed()
            #expect(text.contains("rich push \(richID) (img): Hello there"), "\(text)")
            #expect(text.contains("Secure confirmation."), "\(text)")
            #expect(FileManager.default.contents(atPath: "\(out)/rich-\(richID).png") == image)
        }
    }
}

/// Roles: in accounts mode a user sends to their own devices; other users and tags need
/// the Send right on the hub, granted with `herald hubs grant`.
@Suite("roles", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct RolesTests {
    @Test(
        "without Send a user reaches only their own devices; herald hubs grant gives Send; a bad tag expression is 400 with its position"
    )
    func sendNeedsTheRight() async throws {
        try await LiveStack.with(auth: .accounts) { live in
            let password = EdgeClient.password(of: "dora", in: .accounts)
            try await live.addUser("dora", password: password, send: false)
            try await live.addUser("eve", password: EdgeClient.password(of: "eve", in: .accounts), send: false)
            try await live.register("dora", handle: apnsToken(71), tags: ["news"])
            let dora = EdgeClient.basic("dora", password)
            func post(_ path: String, _ body: String = "hello") async throws -> EdgeClient.Reply {
                try await live.edge.request(
                    "POST", path, authorization: dora, bytes: Data(body.utf8), contentType: "text/plain")
            }
            #expect(try await post("/v1/notifications?kind=secure&to_user=dora").status == 202)
            #expect(try await post("/v1/notifications?kind=alert&to_user=dora").status == 202)
            let other = try await post("/v1/notifications?kind=secure&to_user=eve")
            #expect(other.status == 403 && other.text.contains("own devices"), "\(other.text)")
            let tag = try await post("/v1/notifications?kind=alert&to_tag=news")
            #expect(tag.status == 403 && tag.text.contains("Send"), "\(tag.text)")
            #expect(try await post("/api/notifications?pns=apns&to_tag=eve", #""hi""#).status == 403)
            #expect(try await post("/api/notifications?pns=apns&to_tag=dora", #""hi""#).status == 200)

            let granted = try await runProgram(
                live.configuration.binDirectory + "/herald",
                ["hubs", "grant", "default", "dora", "Send", "--runtime-dir", live.configuration.runtimeDirectory])
            #expect(granted.status == 0 && granted.output.contains("Send"), "\(granted.error)")
            #expect(try await post("/v1/notifications?kind=secure&to_user=eve").status == 202)
            #expect(try await post("/v1/notifications?kind=alert&to_tag=news%20%26%26%20!sports").status == 202)
            let bad = try await post("/v1/notifications?kind=alert&to_tag=news%20%26%26")
            #expect(bad.status == 400 && bad.text.contains("at character"), "\(bad.text)")
        }
    }
}
