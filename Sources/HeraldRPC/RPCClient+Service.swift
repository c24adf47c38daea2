import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldTelemetry
import NIOPosix
import NIOSSL
public import ServiceLifecycle
import Synchronization
import Tracing

extension RPCClient: Service {
    /// Maintains the connection until graceful shutdown, then drains in-flight calls.
    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await runConnections()
        } onGracefulShutdown: {
            self.close()
        }
    }
}

extension RPCClient {
    /// Runs `body` with a connected client and closes it afterwards (tools and tests).
    public static func with<R: Sendable>(
        socketPath: String,
        transport: RPCTransport = .lean,
        timeout: Duration = .seconds(5),
        _ body: (RPCClient) async throws -> R
    ) async throws -> R {
        let client = try RPCClient(socketPath: socketPath, transport: transport, defaultTimeout: timeout)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await client.runConnections() }
            // The group waits for runConnections, which returns once the close has drained.
            defer { client.close() }
            return try await body(client)
        }
    }
}
