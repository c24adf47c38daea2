import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldTelemetry
public import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization
import Tracing

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

/// The connection to one Herald service, over a Unix socket or TCP+TLS, speaking either transport,
/// or to several replicas of it. Calls go through the typed clients generated from proto/
/// (`PayloadServiceClient(rpc)`…), which only accept their own service's methods.
///
/// Every call carries a deadline (the caller's, or ``defaultTimeout``) and waits for the service to
/// be reachable until then, so services can start in any order. Failures arrive as ``ServiceError``
/// with the server's status code and message. Run it (it is a lifecycle `Service`) before calling.
///
/// With several endpoints (replicas of one service), calls take turns over the replicas that
/// answered their last health check (grpc.health.v1, every `healthInterval`), or over all of them
/// when none did. A replica whose call fails UNAVAILABLE (its connection lost, or it cannot be
/// reached) is skipped until it answers SERVING again, and an idempotent call
/// (``idempotentMethods``; a stream only before its first message) is tried once more on another.
///
/// With an ``RPCDiscovery`` (`dns:///name:port`) the replicas are the addresses the name has,
/// looked up again every ``RPCDiscovery/refresh``: a new address gets a connection, one gone is
/// closed once its calls finish, and TLS checks each against the name.
public final class RPCClient: Sendable {
    /// Path of the service's socket (of the chosen transport), or its endpoints, comma-separated.
    public let socketPath: String
    public let transport: RPCTransport
    /// Deadline of calls that do not name their own.
    public let defaultTimeout: Duration
    /// How often replicas' health is checked (with more than one).
    public let healthInterval: Duration

    enum Backend {
        case lean(LeanClient)
        case grpc(GRPCClient<HTTP2ClientTransport.Posix>)
    }

    /// One endpoint's connection and whether it answered its last health check (none yet: not
    /// healthy, so that at start-up every replica is tried in turn, each call waiting for its own).
    final class Replica: Sendable {
        let endpoint: RPCEndpoint
        let backend: Backend
        let healthy = Atomic<Bool>(false)
        /// False once a call or check could not reach it (refused, connection lost), true again
        /// once a check gets through. An unhealthy replica that is only slow (its checks timed out
        /// on a loaded machine) stays reachable, and ``pick(from:excluding:)`` prefers it to one that is
        /// gone: a call waiting for a vanished replica's connection would wait out its deadline.
        let reachable = Atomic<Bool>(true)
        /// Health checks in a row that got no answer in time.
        private let misses = Atomic<Int>(0)
        /// A call got an answer from it since its last health check. A check that times out then
        /// says more about this process than about the replica: on a starved machine (CI's test
        /// process hosts the client, the replicas and sixty other suites) a check can miss its
        /// 1 s while calls to the same replica come back in milliseconds, and ejecting it on
        /// that sent nearly every call to its peer (a CI run saw 194 to 6). A replica that is
        /// frozen answers no call, so two misses still eject it.
        private let answeredSinceCheck = Atomic<Bool>(false)

        init(endpoint: RPCEndpoint, backend: Backend) {
            self.endpoint = endpoint
            self.backend = backend
        }

        /// A call came back from it, with an answer or a service's error.
        func answered() {
            if !answeredSinceCheck.load(ordering: .relaxed) { answeredSinceCheck.store(true, ordering: .relaxed) }
        }

        func checked(serving: Bool) {
            answeredSinceCheck.store(false, ordering: .relaxed)
            misses.store(0, ordering: .relaxed)
            reachable.store(true, ordering: .relaxed)
            healthy.store(serving, ordering: .relaxed)
        }

        func unanswered() {
            reachable.store(true, ordering: .relaxed)
            if answeredSinceCheck.exchange(false, ordering: .relaxed) {
                misses.store(0, ordering: .relaxed)
                return
            }
            if misses.wrappingAdd(1, ordering: .relaxed).newValue >= 2 { healthy.store(false, ordering: .relaxed) }
        }

        func unreachable() {
            reachable.store(false, ordering: .relaxed)
            healthy.store(false, ordering: .relaxed)
        }
    }

    /// The replicas now, and whether ``close()`` was called (no replica is added after).
    let members: Mutex<(replicas: [Replica], closed: Bool)>
    var replicas: [Replica] { members.withLock { $0.replicas } }
    let discovery: RPCDiscovery?
    let tls: TLSFiles?
    let eventLoopGroup: MultiThreadedEventLoopGroup
    /// Round-robin position.
    let turn = Atomic<UInt>(0)
    /// The gRPC clients whose connection loops ``runConnections()`` must run, as replicas come;
    /// finished by ``close()`` (the lean backend has no loop of its own).
    let toRun = AsyncStream<GRPCClient<HTTP2ClientTransport.Posix>>.makeStream()

    /// Methods whose repetition changes nothing but its answer's freshness: reads, checks, and
    /// PUT-style writes of a whole value. Only these are tried again on another replica.
    public static let idempotentMethods: Set<String> = [
        "Authenticate", "AuthorizeSas", "UserExists", "ListUsers", "ListHubs", "GetHub", "ListHubKeys",
        "GetOutcome", "ListInbox", "ListDeliveries", "GetHubCredentials", "ListSends", "SendStats",
        "GetHubPushLimits", "GetHubQueue", "FetchPayload",
        "UpsertRegistration", "ListRegistrations", "StreamAudience", "RemoveHandle", "PutInstallation",
        "GetInstallation",
        "ListInstallations", "ExportDevices", "CheckHandles", "ListDevices",
        "Check", "Watch",
        // An erase's parts (each one finishes what a first call began), and an export's pages.
        "EraseUser", "ListUserDevices", "EraseUserDevices", "EraseDevices", "ExportUser", "ExportUserDevices",
        "ExportDeviceRecords",
    ]

    public convenience init(
        socketPath: String, transport: RPCTransport = .lean, defaultTimeout: Duration = .seconds(5),
        eventLoopGroup: MultiThreadedEventLoopGroup = .singleton
    ) throws {
        try self.init(
            endpoints: [.unix(socketPath)], transport: transport, tls: nil, defaultTimeout: defaultTimeout,
            eventLoopGroup: eventLoopGroup)
    }

    /// A client of a service at `endpoint`; on TCP, `tls` (required there) says whom to trust and
    /// which client certificate to present.
    public convenience init(
        endpoint: RPCEndpoint, transport: RPCTransport = .lean, tls: TLSFiles?, defaultTimeout: Duration = .seconds(5)
    ) throws {
        try self.init(endpoints: [endpoint], transport: transport, tls: tls, defaultTimeout: defaultTimeout)
    }

    /// A client of a service's replicas at `endpoints` (at least one), or, with `discovery`, at
    /// the addresses it finds (then `endpoints` is not used). Its connections run on
    /// `eventLoopGroup`: NIO's shared loops unless the caller gives it loops of its own.
    public init(
        endpoints: [RPCEndpoint], transport: RPCTransport = .lean, tls: TLSFiles?,
        defaultTimeout: Duration = .seconds(5),
        healthInterval: Duration = .seconds(2), discovery: RPCDiscovery? = nil,
        eventLoopGroup: MultiThreadedEventLoopGroup = .singleton
    ) throws {
        guard !endpoints.isEmpty || discovery != nil else { throw ConfigError("a client needs at least one endpoint") }
        self.socketPath = discovery?.description ?? endpoints.map(\.description).joined(separator: ",")
        self.transport = transport
        self.defaultTimeout = defaultTimeout
        self.healthInterval = healthInterval
        self.discovery = discovery
        self.tls = tls
        self.eventLoopGroup = eventLoopGroup
        let replicas =
            discovery != nil
            ? []
            : try endpoints.map {
                Replica(
                    endpoint: $0,
                    backend: try Self.backend(
                        endpoint: $0, transport: transport, tls: tls, eventLoopGroup: eventLoopGroup))
            }
        members = Mutex((replicas, false))
        for replica in replicas { if case .grpc(let grpc) = replica.backend { toRun.continuation.yield(grpc) } }
    }

    static func backend(
        endpoint: RPCEndpoint, transport: RPCTransport, tls: TLSFiles?, serverName: String? = nil,
        eventLoopGroup: MultiThreadedEventLoopGroup
    ) throws -> Backend {
        if case .tcp = endpoint, tls == nil { throw ConfigError("a TCP client needs TLS settings") }
        switch transport {
        case .lean:
            let context = try { () -> NIOSSLContext? in
                if case .tcp = endpoint { return try tls?.clientContext() }
                return nil
            }()
            return .lean(
                LeanClient(endpoint: endpoint, tls: context, serverName: serverName, eventLoopGroup: eventLoopGroup))
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
                guard let tls else { throw ConfigError("a TCP client needs TLS settings") }
                security = tls.grpcClientSecurity()
            }
            let http2 = try HTTP2ClientTransport.Posix(
                target: target,
                transportSecurity: security,
                config: .defaults { config in
                    // Coalescing delays every flush by up to 100 µs; internal calls are latency-bound.
                    config.connection.flushCoalescing = nil
                    // A restarted service is back within a second or two; don't wait long to reconnect.
                    config.backoff.max = .seconds(1)
                    // An address found by name: TLS checks the certificate against the name.
                    if let serverName { config.http2.authority = serverName }
                },
                eventLoopGroup: eventLoopGroup
            )
            return .grpc(GRPCClient(transport: http2))
        }
    }

    /// The replica for the next call: the next healthy one in turn; when none is, the next that is
    /// still reachable (slow, not gone), else the next of all; never `excluding`, and nil when
    /// there is no other.
    func pick(from replicas: [Replica], excluding: Replica? = nil) -> Replica? {
        if replicas.count <= 1 { return excluding == nil ? replicas.first : nil }
        let start = Int(turn.wrappingAdd(1, ordering: .relaxed).oldValue % UInt(replicas.count))
        var reachable: Replica?
        var fallback: Replica?
        for offset in 0..<replicas.count {
            let replica = replicas[(start + offset) % replicas.count]
            if replica === excluding { continue }
            if replica.healthy.load(ordering: .relaxed) { return replica }
            if reachable == nil, replica.reachable.load(ordering: .relaxed) { reachable = replica }
            if fallback == nil { fallback = replica }
        }
        return reachable ?? fallback
    }

    /// Runs `attempt` on a replica and, when it fails UNAVAILABLE on one of several, marks that
    /// one down and tries once more on another, within the same deadline: any call that was never
    /// sent (the lean protocol could not connect), and an idempotent one (with `retry` true)
    /// whatever became of it.
    ///
    /// `attempt` gets the replica, the time left, and whether to fail fast: when another replica
    /// is healthy, a call that cannot reach this one gives up at once instead of waiting for it.
    func withReplica<Result>(
        method: String, timeout: Duration, retry: @escaping @Sendable () -> Bool = { true },
        _ attempt: (Replica, Duration, Bool) async throws -> Result
    ) async throws -> Result {
        let deadline = ContinuousClock.now + timeout
        var failed: Replica?
        while true {
            // One look at the members per attempt: the pick and failFast see the same replicas.
            let replicas = self.replicas
            guard let replica = pick(from: replicas, excluding: failed) else {
                // Only a client that finds its replicas by name has none: wait for the lookup.
                if failed == nil, discovery != nil, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                    continue
                }
                throw ServiceError(.unavailable, "\(socketPath): no replica found")
            }
            let left = failed == nil ? timeout : deadline - .now
            let failFast = replicas.contains { $0 !== replica && $0.healthy.load(ordering: .relaxed) }
            let error: ServiceError
            do {
                let result = try await attempt(replica, left, failFast)
                replica.answered()
                return result
            } catch let unsent as LeanClient.NotSent {
                replica.unreachable()
                error = unsent.error
                if failed == nil, replicas.count > 1, deadline - .now > .milliseconds(10) {
                    failed = replica
                    continue
                }
            } catch let thrown as ServiceError where thrown.code == .unavailable && replicas.count > 1 {
                replica.unreachable()
                error = thrown
                if failed == nil, Self.idempotentMethods.contains(method), retry(), deadline - .now > .milliseconds(10)
                {
                    failed = replica
                    continue
                }
            } catch let thrown as ServiceError
                where ![.unavailable, .deadlineExceeded, .cancelled].contains(thrown.code)
            {
                // The service answered, with an error of its own.
                replica.answered()
                throw thrown
            }
            throw error
        }
    }

    /// Calls a unary RPC. Internal: the generated typed clients (`PayloadServiceClient`…) are the
    /// only callers, so a method can only be called on its own service's connection.
    func call<Request, Response>(
        _ method: UnaryMethod<Request, Response>, _ request: Request, options: RPCCallOptions
    ) async throws -> Response {
        let bytes = try encode(request)
        return try await Self.clientSpan(method.fullName) { trace in
            try await withReplica(method: method.method, timeout: options.timeout ?? defaultTimeout) {
                replica, timeout, failFast in
                try await call(
                    method, bytes, requestID: options.requestID, trace: trace, timeout: timeout, failFast: failFast,
                    on: replica.backend)
            }
        }
    }

    /// Runs a call in a client span when tracing is on (its context is what the metadata carries);
    /// in a trace passed on unsampled, no span: the metadata carries the caller's context as it is.
    /// `body` gets the trace context to send, read once per call (each read of a task-local is a
    /// call into the concurrency library, unspecialised).
    ///
    /// The span is started and ended here rather than by `withSpan`, which would also bind the
    /// span's context as the task's for the call: nothing below reads it (the callee learns the
    /// span from the metadata), and the binding is an unspecialised `TaskLocal.withValue` of the
    /// whole `InstrumentationContext` (1–2k instructions a call, callgrind). A log line written
    /// during the call names the caller's span.
    static func clientSpan<T>(_ method: String, _ body: (PassedOnTrace?) async throws -> T) async throws -> T {
        guard let tracer = HeraldTracing.tracer, !HeraldTracing.isHealthCheck(method) else {
            return try await body(nil)
        }
        if let passed = HeraldTracing.passedOn { return try await body(passed) }
        let current = InstrumentationContext.current
        if let current, HeraldTracing.passesOn(current) {
            return try await body(current.traceContext.map(HeraldTracing.headers(of:)))
        }
        let span = tracer.startSpan(
            method, context: current ?? .topLevel, ofKind: .client, at: DefaultTracerClock.now, function: #function,
            file: #fileID, line: #line)
        defer { span.end() }
        do {
            return try await HeraldTracing.rpc(span, method: method) {
                try await body(HeraldTracing.headers(of: span.identity))
            }
        } catch {
            span.recordError(error)
            throw error
        }
    }

    func call<Request, Response>(
        _ method: UnaryMethod<Request, Response>, _ bytes: [UInt8], requestID: String?, trace: PassedOnTrace?,
        timeout: Duration, failFast: Bool = false,
        on backend: Backend
    ) async throws -> Response {
        switch backend {
        case .lean(let lean):
            let response = try await lean.unary(
                method: method.fullName, request: bytes, metadata: Self.leanMetadata(requestID, trace),
                timeout: timeout,
                failFast: failFast)
            return try decode(Response.self, response)
        case .grpc(let grpc):
            do {
                return try await grpc.unary(
                    request: ClientRequest(message: bytes, metadata: Self.metadata(requestID, trace)),
                    descriptor: MethodDescriptor(fullyQualifiedService: method.service, method: method.method),
                    serializer: RawBytesCoder(),
                    deserializer: HeraldDeserializer<Response>(),
                    options: callOptions(timeout, failFast: failFast)
                ) { response in try response.message }
            } catch let error as RPCError {
                throw Self.serviceError(error)
            }
        }
    }

    /// Calls a server-streaming RPC, handing each response to `onMessage` as it arrives (internal,
    /// as ``call(_:_:options:)``). Tried on another replica only before its first message.
    func stream<Request, Response>(
        _ method: ServerStreamingMethod<Request, Response>, _ request: Request, options: RPCCallOptions,
        onMessage: @escaping @Sendable (Response) async throws -> Void
    ) async throws {
        let bytes = try encode(request)
        let requestID = options.requestID
        let started = Atomic<Bool>(false)
        let onMessage: @Sendable (Response) async throws -> Void = { message in
            started.store(true, ordering: .relaxed)
            try await onMessage(message)
        }
        try await Self.clientSpan(method.fullName) { trace in
            try await withReplica(
                method: method.method, timeout: options.timeout ?? defaultTimeout,
                retry: { !started.load(ordering: .relaxed) }
            ) { replica, timeout, failFast in
                switch replica.backend {
                case .lean(let lean):
                    try await lean.call(
                        method: method.fullName, request: bytes, metadata: Self.leanMetadata(requestID, trace),
                        timeout: timeout, window: LeanClient.streamWindow, failFast: failFast
                    ) { bytes in try await onMessage(try decode(Response.self, bytes)) }
                case .grpc(let grpc):
                    do {
                        try await grpc.serverStreaming(
                            request: ClientRequest(message: bytes, metadata: Self.metadata(requestID, trace)),
                            descriptor: MethodDescriptor(fullyQualifiedService: method.service, method: method.method),
                            serializer: RawBytesCoder(),
                            deserializer: HeraldDeserializer<Response>(),
                            options: callOptions(timeout, failFast: failFast)
                        ) { response in
                            for try await message in response.messages { try await onMessage(message) }
                        }
                    } catch let error as RPCError {
                        throw Self.serviceError(error)
                    }
                }
            }
        }
    }

    /// Asks the connections to close once in-flight calls finish.
    public func close() {
        let replicas = members.withLock { members in
            members.closed = true
            return members.replicas
        }
        for replica in replicas { Self.close(replica.backend) }
        toRun.continuation.finish()
    }

    static func close(_ backend: Backend) {
        switch backend {
        case .lean(let lean): lean.close()
        case .grpc(let grpc): grpc.beginGracefulShutdown()
        }
    }

    /// Runs the transports' connection management until ``close()``; with several replicas (or
    /// a discovery) checks their health every ``healthInterval``; with a discovery, looks the
    /// replicas up every ``RPCDiscovery/refresh``.
    func runConnections() async throws {
        // The health checks and look-ups stop at close; gRPC's connection loops end by themselves
        // once close() has begun their graceful shutdown and in-flight calls have drained.
        let checks = replicas.count > 1 || discovery != nil ? Task { await self.checkReplicas() } : nil
        let lookups = discovery.map { discovery in Task { await self.lookUp(discovery) } }
        try await withThrowingDiscardingTaskGroup { group in
            await withTaskCancellationHandler {
                for await grpc in toRun.stream { group.addTask { try await grpc.runConnections() } }
            } onCancel: {
                checks?.cancel()
                lookups?.cancel()
            }
            checks?.cancel()
            lookups?.cancel()
        }
    }
}
