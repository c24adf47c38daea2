import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import Logging
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// One replica of a test service: the lean and gRPC servers of a table that answers with its
/// name, running until ``stop()``.
final class TestReplica: Sendable {
    let name: String
    let directory: String
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    /// Authenticate (idempotent) answers `user: name`; StorePayload (not idempotent) answers the
    /// replica's number as its id.
    init(_ name: String, number: Int64, directory: String) throws {
        self.name = name
        self.directory = directory
        var table = MethodTable()
        table.register(AuthServiceMethods.authenticate) { _, _ in AuthenticateResponse(user: name) }
        table.register(PayloadServiceMethods.storePayload) { _, _ in StorePayloadResponse(id: number) }
        let health = HealthReporter()
        health.register(into: &table)
        for service in table.services + [""] { health.set(service, .serving) }
        let logger = Logger(label: "replica-\(name)")
        let lean = LeanServer(table: table, socketPath: directory + "/\(name).sock", logger: logger, health: health)
        let grpc = try RPCServer(table: table, socketPath: directory + "/\(name).grpc.sock", logger: logger, health: health)
        let group = ServiceGroup(configuration: .init(services: [.init(service: lean), .init(service: grpc)], logger: logger))
        self.group = group
        running = Task { try await group.run() }
    }

    func socket(_ transport: RPCTransport) -> String { directory + (transport == .lean ? "/\(name).sock" : "/\(name).grpc.sock") }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await running.result
    }
}

@Suite("a client of several replicas", .serialized, .timeLimit(.minutes(2)))
struct ReplicaClientTests {
    @Test(
        "calls take turns over healthy replicas; a replica that goes away is skipped, its calls retried elsewhere, and used again once back",
        arguments: RPCTransport.allCases)
    func spreadAndFailover(_ transport: RPCTransport) async throws {
        var template = Array("/tmp/herald-rep-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let a = try TestReplica("a", number: 1, directory: dir)
        var b = try TestReplica("b", number: 2, directory: dir)
        var started = [a, b]
        // 20 s as the transport tests: CI runs this beside the 1,000-call tests on two cores.
        let client = try RPCClient(
            endpoints: [.unix(a.socket(transport)), .unix(b.socket(transport))], transport: transport, tls: nil,
            defaultTimeout: .seconds(20), healthInterval: .milliseconds(100))
        let running = Task { try await client.run() }
        defer {
            client.close()
            running.cancel()
        }
        let auth = AuthServiceClient(client)
        let payload = PayloadServiceClient(client)
        func answers(_ count: Int) async throws -> [String: Int] {
            var seen: [String: Int] = [:]
            for _ in 0..<count { seen[try await auth.authenticate(AuthenticateRequest(authorization: "x")).user, default: 0] += 1 }
            return seen
        }
        do {
            #expect(try await TransportConformanceTests.waitFor { client.replicaHealth.allSatisfy(\.healthy) })
            let both = try await answers(100)
            #expect((both["a"] ?? 0) >= 40 && (both["b"] ?? 0) >= 40, "\(both)")

            await b.stop()
            if transport == .grpc {
                // gRPC cannot tell a call that never left from one lost on the way: only idempotent
                // calls are retried at once; the rest go elsewhere once health has seen b go.
                #expect(try await answers(20) == ["a": 20])
                #expect(try await TransportConformanceTests.waitFor { client.replicaHealth.map(\.healthy) == [true, false] })
            }
            // Lean: b's socket is gone, so a call for b never leaves and goes to a, idempotent or not.
            for _ in 0..<20 { #expect(try await payload.storePayload(StorePayloadRequest(recipient: "r")).id == 1) }
            #expect(try await answers(50) == ["a": 50])
            #expect(client.replicaHealth.map(\.healthy) == [true, false])

            b = try TestReplica("b", number: 2, directory: dir)
            started.append(b)
            #expect(try await TransportConformanceTests.waitFor { client.replicaHealth.allSatisfy(\.healthy) }, "b answers SERVING again")
            let again = try await answers(100)
            #expect((again["a"] ?? 0) >= 40 && (again["b"] ?? 0) >= 40, "\(again)")
        } catch {
            for replica in started { await replica.stop() }
            throw error
        }
        for replica in started { await replica.stop() }
    }

}
