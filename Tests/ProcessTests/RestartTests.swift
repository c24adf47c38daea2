import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// The secure-push flow across a service killed and restarted by the supervisor, and across a
/// restart of the whole stack: needs the services as processes.
@Suite("secure push across restarts", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct RestartTests {
    @Test(
        "a service that dies is restarted by the supervisor, and the flow goes on", .storeIndependent,
        arguments: RPCTransport.allCases)
    func supervisorRestartsChildren(_ transport: RPCTransport) async throws {
        try await LiveStack.with(runner: .processes, configure: { $0.rpcTransport = transport }) { live in
            let pid = try #require(try await live.stack.pid(of: "payload"))
            kill(pid, SIGKILL)
            let deadline = ContinuousClock.now + .seconds(30)
            while try await live.stack.restartCount(of: "payload") == 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(try await live.stack.restartCount(of: "payload") == 1)
            try await live.stack.waitUntilHealthy("payload")
            #expect(try await live.edge.request("POST", "/api/notifications", as: "erin").status == 200)
        }
    }

    @Test(
        "restarting the stack keeps registrations and payloads", .everyBackendItself,
        arguments: RPCTransport.allCases, StoreBackend.available)
    func restartKeepsData(_ transport: RPCTransport, _ database: StoreBackend) async throws {
        try await LiveStack.withDirectory { directory in
            let prefix = TestDatabases.freshPrefix()
            let token = apnsToken(3)
            var registrationID = ""
            var secureID = ""
            try await LiveStack.with(
                runner: .processes, directory: directory, database: database, schemaPrefix: prefix,
                configure: { $0.rpcTransport = transport }
            ) {
                live in
                registrationID = try #require(
                    try JSONSerialization.jsonObject(
                        with: try await live.edge.request("POST", "/api/register?handle=\(token)", as: "dana").body,
                        options: .fragmentsAllowed) as? String)
                let put = try await live.edge.request(
                    "PUT", "/api/register/\(registrationID)", as: "dana",
                    body: #"{"Platform":"apns","Handle":"\#(token)"}"#
                )
                #expect(put.status == 200)
                #expect(try await live.edge.request("POST", "/api/notifications", as: "dana").status == 200)
                let push = try #require(try await live.waitForInbox { $0.handle == token }.first)
                secureID = try #require(
                    String(decoding: push.payload, as: UTF8.self).firstMatch(of: /"secureId":"(\d+)"/)?.1
                )
                .description
            }
            try await LiveStack.with(
                runner: .processes, directory: directory, database: database, schemaPrefix: prefix,
                configure: { $0.rpcTransport = transport }
            ) {
                live in
                // The payload survived, still unread.
                let fetched = try await live.edge.request("GET", "/api/notifications/\(secureID)", as: "dana")
                #expect(fetched.status == 200)
                #expect(try fetched.json()["Read"] as? Bool == false)
                // The registration survived: same id for the handle, and it can still be updated.
                let again = try await live.edge.request("POST", "/api/register?handle=\(token)", as: "dana")
                #expect(
                    try JSONSerialization.jsonObject(with: again.body, options: .fragmentsAllowed) as? String
                        == registrationID)
                let put = try await live.edge.request(
                    "PUT", "/api/register/\(registrationID)", as: "dana",
                    body: #"{"Platform":"apns","Handle":"\#(token)"}"#
                )
                #expect(put.status == 200)
                // And the inbox kept what it recorded.
                #expect(try await live.inbox().contains { $0.handle == token })
            }
        }
    }
}
