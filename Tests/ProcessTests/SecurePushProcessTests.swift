import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// SecurePushTests's tests that need the services as processes (a kill, a restart, one process's
/// memory or metrics).
@Suite("secure push end to end: as processes", .serialized, .timeLimit(.minutes(3)))
struct SecurePushProcessTests {
    @Test("a service that dies is restarted by the supervisor, and the flow goes on", arguments: RPCTransport.allCases)
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
}
