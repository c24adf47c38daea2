import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
public import HeraldProto
public import ServiceLifecycle

/// A typed client of one Herald service over its Unix socket.
///
/// Every call carries a deadline (the caller's, or ``defaultTimeout``) and waits for the service to
/// be reachable until then, so services can start in any order. Failures arrive as ``ServiceError``
/// with the server's status code and message. Run it (it is a lifecycle `Service`) before calling.
public final class RPCClient: Sendable {
    /// Path of the service's gRPC socket.
    public let socketPath: String
    /// Deadline of calls that do not name their own.
    public let defaultTimeout: Duration
    private let grpc: GRPCClient<HTTP2ClientTransport.Posix>

    public init(socketPath: String, defaultTimeout: Duration = .seconds(5)) throws {
        self.socketPath = socketPath
        self.defaultTimeout = defaultTimeout
        let transport = try HTTP2ClientTransport.Posix(
            target: .unixDomainSocket(path: socketPath),
            transportSecurity: .plaintext,
            config: .defaults { config in
                // Coalescing delays every flush by up to 100 µs; internal calls are latency-bound.
                config.connection.flushCoalescing = nil
                // A restarted service is back within a second or two; don't wait long to reconnect.
                config.backoff.max = .seconds(1)
            }
        )
        self.grpc = GRPCClient(transport: transport)
    }

    /// Calls a unary RPC.
    public func call<Request, Response>(
        _ method: UnaryMethod<Request, Response>,
        _ request: Request,
        requestID: String? = nil,
        timeout: Duration? = nil
    ) async throws -> Response {
        do {
            return try await grpc.unary(
                request: ClientRequest(message: request, metadata: Self.metadata(requestID)),
                descriptor: MethodDescriptor(fullyQualifiedService: method.service, method: method.method),
                serializer: HeraldSerializer<Request>(),
                deserializer: HeraldDeserializer<Response>(),
                options: options(timeout)
            ) { response in try response.message }
        } catch let error as RPCError {
            throw ServiceError(StatusCode(error.code), error.message)
        }
    }

    /// Calls a server-streaming RPC, handing each response to `onMessage` as it arrives.
    public func stream<Request, Response>(
        _ method: ServerStreamingMethod<Request, Response>,
        _ request: Request,
        requestID: String? = nil,
        timeout: Duration? = nil,
        onMessage: @escaping @Sendable (Response) async throws -> Void
    ) async throws {
        do {
            try await grpc.serverStreaming(
                request: ClientRequest(message: request, metadata: Self.metadata(requestID)),
                descriptor: MethodDescriptor(fullyQualifiedService: method.service, method: method.method),
                serializer: HeraldSerializer<Request>(),
                deserializer: HeraldDeserializer<Response>(),
                options: options(timeout)
            ) { response in
                for try await message in response.messages { try await onMessage(message) }
            }
        } catch let error as RPCError {
            throw ServiceError(StatusCode(error.code), error.message)
        }
    }

    /// Asks the connection to close once in-flight calls finish.
    public func close() {
        grpc.beginGracefulShutdown()
    }

    private func options(_ timeout: Duration?) -> CallOptions {
        var options = CallOptions.defaults
        options.timeout = timeout ?? defaultTimeout
        options.waitForReady = true
        return options
    }

    private static func metadata(_ requestID: String?) -> Metadata {
        var metadata: Metadata = [:]
        if let requestID { metadata.addString(requestID, forKey: requestIDKey) }
        return metadata
    }
}

extension RPCClient: Service {
    /// Maintains the connection until graceful shutdown, then drains in-flight calls.
    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await grpc.runConnections()
        } onGracefulShutdown: {
            self.close()
        }
    }
}

extension RPCClient {
    /// Runs `body` with a connected client and closes it afterwards (tools and tests).
    public static func with<R: Sendable>(
        socketPath: String,
        timeout: Duration = .seconds(5),
        _ body: (RPCClient) async throws -> R
    ) async throws -> R {
        let client = try RPCClient(socketPath: socketPath, defaultTimeout: timeout)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await client.grpc.runConnections() }
            // The group waits for runConnections, which returns once the close has drained.
            defer { client.close() }
            return try await body(client)
        }
    }
}
