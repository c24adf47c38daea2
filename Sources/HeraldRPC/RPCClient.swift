import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HeraldModel
public import HeraldProto
import NIOSSL
public import ServiceLifecycle

/// Which transport a client speaks.
public enum RPCTransport: String, CaseIterable, Sendable {
    /// The lean protocol (docs/rpc-protocol.md) on `<service>.sock`: Herald's own calls.
    case lean
    /// Standard gRPC over HTTP/2 on `<service>.grpc.sock`.
    case grpc
}

/// Per-call options of a typed client (`PayloadServiceClient` and the others generated from proto/).
public struct RPCCallOptions: Sendable {
    /// Sent as `x-request-id`, so the callee's log lines carry the caller's request id.
    public var requestID: String?
    /// The call's deadline; nil takes the client's ``RPCClient/defaultTimeout``.
    public var timeout: Duration?

    public init(requestID: String? = nil, timeout: Duration? = nil) {
        self.requestID = requestID
        self.timeout = timeout
    }
}

/// The connection to one Herald service, over a Unix socket or TCP+TLS, speaking either transport.
/// Calls go through the typed clients generated from proto/ (`PayloadServiceClient(rpc)`…), which
/// only accept their own service's methods.
///
/// Every call carries a deadline (the caller's, or ``defaultTimeout``) and waits for the service to
/// be reachable until then, so services can start in any order. Failures arrive as ``ServiceError``
/// with the server's status code and message. Run it (it is a lifecycle `Service`) before calling.
public final class RPCClient: Sendable {
    /// Path of the service's socket (of the chosen transport).
    public let socketPath: String
    public let transport: RPCTransport
    /// Deadline of calls that do not name their own.
    public let defaultTimeout: Duration

    private enum Backend {
        case lean(LeanClient)
        case grpc(GRPCClient<HTTP2ClientTransport.Posix>)
    }

    private let backend: Backend
    /// Finished by ``close()``; the lean backend has no connection loop of its own to end.
    private let closed = AsyncStream<Void>.makeStream()

    public convenience init(socketPath: String, transport: RPCTransport = .lean, defaultTimeout: Duration = .seconds(5)) throws {
        try self.init(endpoint: .unix(socketPath), transport: transport, tls: nil, defaultTimeout: defaultTimeout)
    }

    /// A client of a service at `endpoint`; on TCP, `tls` (required there) says whom to trust and
    /// which client certificate to present.
    public init(endpoint: RPCEndpoint, transport: RPCTransport = .lean, tls: TLSFiles?, defaultTimeout: Duration = .seconds(5)) throws {
        self.socketPath = endpoint.description
        self.transport = transport
        self.defaultTimeout = defaultTimeout
        if case .tcp = endpoint, tls == nil { throw ConfigError("a TCP client needs TLS settings") }
        switch transport {
        case .lean:
            let context = try { () -> NIOSSLContext? in
                if case .tcp = endpoint { return try tls?.clientContext() }
                return nil
            }()
            backend = .lean(LeanClient(endpoint: endpoint, tls: context))
        case .grpc:
            let target: any ResolvableTarget
            let security: HTTP2ClientTransport.Posix.TransportSecurity
            switch endpoint {
            case .unix(let path):
                target = .unixDomainSocket(path: path)
                security = .plaintext
            case .tcp(let host, let port):
                var v4 = in_addr()
                if inet_pton(AF_INET, host, &v4) == 1 {
                    target = .ipv4(address: host, port: port)
                } else if RPCEndpoint.isIPLiteral(host) {
                    target = .ipv6(address: host, port: port)
                } else {
                    target = .dns(host: host, port: port)
                }
                security = tls!.grpcClientSecurity()
            }
            let http2 = try HTTP2ClientTransport.Posix(
                target: target,
                transportSecurity: security,
                config: .defaults { config in
                    // Coalescing delays every flush by up to 100 µs; internal calls are latency-bound.
                    config.connection.flushCoalescing = nil
                    // A restarted service is back within a second or two; don't wait long to reconnect.
                    config.backoff.max = .seconds(1)
                }
            )
            backend = .grpc(GRPCClient(transport: http2))
        }
    }

    /// Calls a unary RPC. Internal: the generated typed clients (`PayloadServiceClient`…) are the
    /// only callers, so a method can only be called on its own service's connection.
    func call<Request, Response>(
        _ method: UnaryMethod<Request, Response>, _ request: Request, options: RPCCallOptions
    ) async throws -> Response {
        let requestID = options.requestID
        let timeout = options.timeout
        switch backend {
        case .lean(let lean):
            let response = try await lean.unary(
                method: method.fullName, request: try encode(request), metadata: Self.leanMetadata(requestID),
                timeout: timeout ?? defaultTimeout)
            return try decode(Response.self, response)
        case .grpc(let grpc):
            do {
                return try await grpc.unary(
                    request: ClientRequest(message: try encode(request), metadata: Self.metadata(requestID)),
                    descriptor: MethodDescriptor(fullyQualifiedService: method.service, method: method.method),
                    serializer: RawBytesCoder(),
                    deserializer: HeraldDeserializer<Response>(),
                    options: callOptions(timeout)
                ) { response in try response.message }
            } catch let error as RPCError {
                throw Self.serviceError(error)
            }
        }
    }

    /// Calls a server-streaming RPC, handing each response to `onMessage` as it arrives (internal,
    /// as ``call(_:_:options:)``).
    func stream<Request, Response>(
        _ method: ServerStreamingMethod<Request, Response>, _ request: Request, options: RPCCallOptions,
        onMessage: @escaping @Sendable (Response) async throws -> Void
    ) async throws {
        let requestID = options.requestID
        let timeout = options.timeout
        switch backend {
        case .lean(let lean):
            try await lean.call(
                method: method.fullName, request: try encode(request), metadata: Self.leanMetadata(requestID),
                timeout: timeout ?? defaultTimeout, window: LeanClient.streamWindow
            ) { bytes in try await onMessage(try decode(Response.self, bytes)) }
        case .grpc(let grpc):
            do {
                try await grpc.serverStreaming(
                    request: ClientRequest(message: try encode(request), metadata: Self.metadata(requestID)),
                    descriptor: MethodDescriptor(fullyQualifiedService: method.service, method: method.method),
                    serializer: RawBytesCoder(),
                    deserializer: HeraldDeserializer<Response>(),
                    options: callOptions(timeout)
                ) { response in
                    for try await message in response.messages { try await onMessage(message) }
                }
            } catch let error as RPCError {
                throw Self.serviceError(error)
            }
        }
    }

    /// Asks the connection to close once in-flight calls finish.
    public func close() {
        switch backend {
        case .lean(let lean): lean.close()
        case .grpc(let grpc): grpc.beginGracefulShutdown()
        }
        closed.continuation.finish()
    }

    /// Runs the transport's connection management until ``close()``.
    fileprivate func runConnections() async throws {
        switch backend {
        case .lean: for await _ in closed.stream {}
        case .grpc(let grpc): try await grpc.runConnections()
        }
    }

    private func callOptions(_ timeout: Duration?) -> CallOptions {
        var options = CallOptions.defaults
        options.timeout = timeout ?? defaultTimeout
        options.waitForReady = true
        options.maxRequestMessageBytes = RPCLimits.maxMessageBytes
        options.maxResponseMessageBytes = RPCLimits.maxMessageBytes
        return options
    }

    /// Encodes a request once for either transport, and refuses one over the message limit before
    /// anything is sent (grpc-swift's client would not; the server would reset the stream).
    private func encode<M: HeraldMessage>(_ message: M) throws -> [UInt8] {
        let bytes: [UInt8]
        do {
            bytes = try message.serializedBytes()
        } catch let error as ProtoError {
            throw ServiceError.invalidArgument(error.description)
        }
        guard bytes.count <= RPCLimits.maxMessageBytes else {
            throw ServiceError(
                .resourceExhausted, "\(M.protoName) of \(bytes.count) bytes exceeds the limit of \(RPCLimits.maxMessageBytes)")
        }
        return bytes
    }

    private func decode<M: HeraldMessage>(_ type: M.Type, _ bytes: [UInt8]) throws -> M {
        do {
            return try M(serializedBytes: bytes)
        } catch {
            throw ServiceError(.internal, "malformed \(M.protoName) from \(socketPath)")
        }
    }

    /// A gRPC failure as a ``ServiceError``, its string trailers carried over as metadata.
    private static func serviceError(_ error: RPCError) -> ServiceError {
        var metadata: [String: String] = [:]
        for entry in error.metadata {
            if ServiceError.metadataKeys.contains(entry.key), case .string(let value) = entry.value { metadata[entry.key] = value }
        }
        return ServiceError(StatusCode(error.code), error.message, metadata: metadata)
    }

    private static func metadata(_ requestID: String?) -> Metadata {
        var metadata: Metadata = [:]
        if let requestID { metadata.addString(requestID, forKey: requestIDKey) }
        return metadata
    }

    private static func leanMetadata(_ requestID: String?) -> [LeanMetadataEntry] {
        requestID.map { [LeanMetadataEntry(key: requestIDKey, value: $0)] } ?? []
    }
}

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
