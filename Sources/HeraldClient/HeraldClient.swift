// One import for another team's Swift service: the message types, the typed clients and the error
// vocabulary. Re-exported (as swift-nio's `NIO` and Vapor do) so a caller writes `import HeraldClient`
// and not four module names that are Herald's internal layout.
@_exported import HeraldModel
@_exported import HeraldProto
@_exported import HeraldRPC
public import ServiceLifecycle

/// Herald's four services, typed, over the lean protocol or gRPC, on Unix sockets or TCP+TLS.
///
/// ```swift
/// let herald = try HeraldClient(endpoints: .runtimeDirectory("/run/herald"))
/// try await herald.run { herald in
///     let outcome = try await herald.dispatch.send(request, requestID: "checkout-42", timeout: .seconds(2))
/// }
/// ```
///
/// Every call has a deadline (its own `timeout:`, else `defaultTimeout`) and waits for the service
/// to be reachable until then. Failures are ``ServiceError``s with the service's status code and
/// message. In a long-running service, add the client to your `ServiceGroup` instead of ``run(_:)``.
public final class HeraldClient: Sendable {
    public let auth: AuthServiceClient
    public let registration: RegistrationServiceClient
    public let payload: PayloadServiceClient
    public let dispatch: DispatchServiceClient
    private let connections: [RPCClient]

    /// Where each service listens.
    public struct Endpoints: Sendable {
        public var auth: RPCEndpoint
        public var registration: RPCEndpoint
        public var payload: RPCEndpoint
        public var dispatch: RPCEndpoint

        public init(auth: RPCEndpoint, registration: RPCEndpoint, payload: RPCEndpoint, dispatch: RPCEndpoint) {
            self.auth = auth
            self.registration = registration
            self.payload = payload
            self.dispatch = dispatch
        }

        /// The sockets of a stack's runtime folder (`herald up`, docker-compose's shared volume):
        /// `<service>.sock` for the lean protocol, `<service>.grpc.sock` for gRPC.
        public static func runtimeDirectory(_ directory: String, transport: RPCTransport = .lean) -> Endpoints {
            func socket(_ service: String) -> RPCEndpoint {
                .unix("\(directory)/\(service)\(transport == .lean ? "" : ".grpc").sock")
            }
            return Endpoints(
                auth: socket("auth"), registration: socket("registration"), payload: socket("payload"),
                dispatch: socket("dispatch"))
        }
    }

    /// `tls` is required for TCP endpoints (whom to trust, and a client certificate for mutual TLS).
    public init(
        endpoints: Endpoints, transport: RPCTransport = .lean, tls: TLSFiles? = nil,
        defaultTimeout: Duration = .seconds(5)
    ) throws {
        func connect(_ endpoint: RPCEndpoint) throws -> RPCClient {
            try RPCClient(endpoint: endpoint, transport: transport, tls: tls, defaultTimeout: defaultTimeout)
        }
        let auth = try connect(endpoints.auth)
        let registration = try connect(endpoints.registration)
        let payload = try connect(endpoints.payload)
        let dispatch = try connect(endpoints.dispatch)
        self.auth = AuthServiceClient(auth)
        self.registration = RegistrationServiceClient(registration)
        self.payload = PayloadServiceClient(payload)
        self.dispatch = DispatchServiceClient(dispatch)
        connections = [auth, registration, payload, dispatch]
    }

    /// Runs `body` with the connections up, and closes them (after in-flight calls) when it returns.
    public func run<Result: Sendable>(_ body: (HeraldClient) async throws -> Result) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.maintainConnections() }
            defer { close() }
            return try await body(self)
        }
    }

    /// Maintains every connection until ``close()`` has drained them.
    private func maintainConnections() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for connection in connections { group.addTask { try await connection.run() } }
            try await group.waitForAll()
        }
    }

    /// Asks every connection to close once its in-flight calls finish.
    public func close() {
        for connection in connections { connection.close() }
    }
}

extension HeraldClient: Service {
    /// Maintains the connections until graceful shutdown, then drains in-flight calls.
    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await maintainConnections()
        } onGracefulShutdown: {
            self.close()
        }
    }
}
