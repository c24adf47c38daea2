import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
import Logging
import PayloadService
import ServiceLifecycle
import Testing

/// A service's start-up is a value (``ServiceDefinition``): the same one the executable runs can be
/// built and run inside a test, and stopped without the process exiting.
@Suite("services built in-process", .timeLimit(.minutes(2)), .watchedForStalls)
struct InProcessServiceTests {
    @Test("herald-payload's definition serves inside a test, then drains and removes its sockets on request")
    func payloadRunsInProcess() async throws {
        var template = Array("/tmp/herald-inproc-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let reader = try ConfigReader(arguments: [
            "--runtime-dir", dir, "--data-dir", dir, "--purge-interval-seconds", "5",
        ])
        let group = try await HeraldProcess.makeServiceGroup(
            PayloadServer.definition, reader: reader, logger: Logger(label: "test"))

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            for transport in RPCTransport.allCases {
                let socket = dir + (transport == .lean ? "/payload.sock" : "/payload.grpc.sock")
                // Start-up (migrations, two listeners) under a loaded CI machine once took longer
                // than the call's deadline: wait for the socket, then call.
                let deadline = ContinuousClock.now + .seconds(60)
                while !FileManager.default.fileExists(atPath: socket), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                let fetched = try await RPCClient.with(socketPath: socket, transport: transport, timeout: .seconds(30))
                { rpc in
                    let payload = PayloadServiceClient(rpc)
                    let stored = try await payload.storePayload(
                        StorePayloadRequest(
                            recipient: "alice", kind: .secure, content: Array("hi".utf8), contentType: "text/plain"))
                    return try await payload.fetchPayload(FetchPayloadRequest(id: stored.id, requester: "alice"))
                }
                #expect(fetched.content == Array("hi".utf8), "over \(transport)")
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/payload.sock"))
        #expect(!FileManager.default.fileExists(atPath: dir + "/payload.grpc.sock"))
    }

    @Test("a bad setting is a thrown ConfigError, not an exit")
    func badSettingThrows() async throws {
        let reader = try ConfigReader(arguments: ["--runtime-dir", "/tmp/unused", "--no-such-key", "1"])
        await #expect(throws: ConfigError.self) {
            _ = try await HeraldProcess.makeServiceGroup(
                PayloadServer.definition, reader: reader, logger: Logger(label: "test"))
        }
    }
}
