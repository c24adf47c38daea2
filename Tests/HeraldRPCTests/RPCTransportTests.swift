import Foundation
import HeraldProto
import HeraldRPC
import Logging
import ServiceLifecycle
import Synchronization
import Testing

/// Set by the slow test handler when the server cancels it.
let slowHandlerCancelled = Mutex(false)

/// The method table served over gRPC on a real Unix socket, called through RPCClient.
@Suite("gRPC binding over Unix sockets", .timeLimit(.minutes(1)))
struct RPCTransportTests {
    struct Boom: Error {}

    /// AuthService/Authenticate doubles as a test method: `authorization` picks the behaviour.
    static func table() -> MethodTable {
        var table = MethodTable()
        table.register(AuthServiceMethods.authenticate) { request, context in
            switch request.authorization {
            case "not-found": throw ServiceError.notFound("no such thing")
            case "boom": throw Boom()
            case "slow":
                do {
                    try await Task.sleep(for: .seconds(30))
                } catch {
                    slowHandlerCancelled.withLock { $0 = true }
                    throw error
                }
                return AuthenticateResponse()
            default: return AuthenticateResponse(user: request.authorization, scheme: context.requestID)
            }
        }
        table.register(RegistrationServiceMethods.streamAudience) { request, _, stream in
            let count = Int(request.tag) ?? 0
            for batch in stride(from: 0, to: count, by: 500) {
                let registrations = (batch..<min(batch + 500, count)).map { Registration(registrationID: "r-\($0)") }
                try await stream.send(AudienceBatch(registrations: registrations))
            }
        }
        return table
    }

    static func withServer(_ body: (RPCClient, String) async throws -> Void) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("herald-rpc-\(UUID().uuidString.prefix(8))").path
        try makePrivateDirectory(dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let socket = dir + "/test.grpc.sock"
        var table = table()
        let health = HealthReporter()
        health.register(into: &table)
        let logger = Logger(label: "test")
        let server = RPCServer(table: table, health: health, socketPath: socket, logger: logger)
        let client = try RPCClient(socketPath: socket, defaultTimeout: .seconds(5))
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: client), .init(service: server)], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            do {
                try await body(client, socket)
            } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(!FileManager.default.fileExists(atPath: socket), "socket removed on shutdown")
    }

    @Test("a unary call succeeds and carries the request id")
    func unary() async throws {
        try await Self.withServer { client, socket in
            let answer = try await client.call(
                AuthServiceMethods.authenticate, AuthenticateRequest(authorization: "hello"), requestID: "req-42")
            #expect(answer == AuthenticateResponse(user: "hello", scheme: "req-42"))
            let mode = try FileManager.default.attributesOfItem(atPath: socket)[.posixPermissions] as? Int
            #expect(mode == 0o660)
        }
    }

    @Test("a ServiceError reaches the caller with its code and message")
    func expectedError() async throws {
        try await Self.withServer { client, _ in
            await #expect(throws: ServiceError(.notFound, "no such thing")) {
                try await client.call(AuthServiceMethods.authenticate, AuthenticateRequest(authorization: "not-found"))
            }
        }
    }

    @Test("an unexpected error is INTERNAL without its detail")
    func unexpectedError() async throws {
        try await Self.withServer { client, _ in
            await #expect(throws: ServiceError(.internal, "internal error")) {
                try await client.call(AuthServiceMethods.authenticate, AuthenticateRequest(authorization: "boom"))
            }
        }
    }

    @Test("the caller's deadline ends a slow call, and the server cancels its handler")
    func deadline() async throws {
        try await Self.withServer { client, _ in
            await #expect {
                try await client.call(
                    AuthServiceMethods.authenticate, AuthenticateRequest(authorization: "slow"), timeout: .milliseconds(300))
            } throws: { error in
                (error as? ServiceError)?.code == .deadlineExceeded
            }
            let deadline = ContinuousClock.now + .seconds(10)
            while !slowHandlerCancelled.withLock({ $0 }), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(slowHandlerCancelled.withLock { $0 }, "the handler was cancelled at the deadline")
        }
    }

    @Test("a server stream delivers every record in order")
    func serverStream() async throws {
        try await Self.withServer { client, _ in
            let received = Received()
            try await client.stream(RegistrationServiceMethods.streamAudience, StreamAudienceRequest(tag: "2345")) { batch in
                await received.append(batch.registrations.map(\.registrationID))
            }
            let ids = await received.ids
            #expect(ids.count == 2345)
            #expect(ids.first == "r-0")
            #expect(ids.last == "r-2344")
        }
    }

    @Test("grpc.health.v1 reports the server and each service")
    func health() async throws {
        try await Self.withServer { client, _ in
            for service in ["", "herald.v1.AuthService", "herald.v1.RegistrationService"] {
                let answer = try await client.call(HealthMethods.check, HealthCheckRequest(service: service))
                #expect(answer.status == .serving)
            }
            await #expect {
                try await client.call(HealthMethods.check, HealthCheckRequest(service: "nope"))
            } throws: { error in
                (error as? ServiceError)?.code == .notFound
            }
        }
    }

    @Test("an unknown socket is UNAVAILABLE by the deadline")
    func unreachable() async throws {
        try await RPCClient.with(socketPath: "/tmp/herald-missing-\(UUID().uuidString.prefix(8)).sock") { client in
            await #expect {
                try await client.call(HealthMethods.check, HealthCheckRequest(), timeout: .milliseconds(300))
            } throws: { error in
                [.unavailable, .deadlineExceeded].contains((error as? ServiceError)?.code)
            }
        }
    }

    actor Received {
        var ids: [String] = []
        func append(_ more: [String]) { ids += more }
    }
}
