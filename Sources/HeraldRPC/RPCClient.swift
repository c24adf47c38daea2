import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldTelemetry
public import NIOPosix
import NIOSSL
public import ServiceLifecycle
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

    private enum Backend {
        case lean(LeanClient)
        case grpc(GRPCClient<HTTP2ClientTransport.Posix>)
    }

    /// One endpoint's connection and whether it answered its last health check (none yet: not
    /// healthy, so that at start-up every replica is tried in turn, each call waiting for its own).
    private final class Replica: Sendable {
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
    private let members: Mutex<(replicas: [Replica], closed: Bool)>
    private var replicas: [Replica] { members.withLock { $0.replicas } }
    private let discovery: RPCDiscovery?
    private let tls: TLSFiles?
    private let eventLoopGroup: MultiThreadedEventLoopGroup
    /// Round-robin position.
    private let turn = Atomic<UInt>(0)
    /// The gRPC clients whose connection loops ``runConnections()`` must run, as replicas come;
    /// finished by ``close()`` (the lean backend has no loop of its own).
    private let toRun = AsyncStream<GRPCClient<HTTP2ClientTransport.Posix>>.makeStream()

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

    private static func backend(
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
    private func pick(from replicas: [Replica], excluding: Replica? = nil) -> Replica? {
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
    private func withReplica<Result>(
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
    private static func clientSpan<T>(_ method: String, _ body: (PassedOnTrace?) async throws -> T) async throws -> T {
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

    private func call<Request, Response>(
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

    private static func close(_ backend: Backend) {
        switch backend {
        case .lean(let lean): lean.close()
        case .grpc(let grpc): grpc.beginGracefulShutdown()
        }
    }

    /// Runs the transports' connection management until ``close()``; with several replicas (or
    /// a discovery) checks their health every ``healthInterval``; with a discovery, looks the
    /// replicas up every ``RPCDiscovery/refresh``.
    fileprivate func runConnections() async throws {
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

    /// Looks the replicas up now and every `discovery.refresh` until cancelled. A failed look-up
    /// keeps the replicas known (a DNS hiccup is not every pod gone).
    private func lookUp(_ discovery: RPCDiscovery) async {
        while !Task.isCancelled {
            if let found = await discovery.resolve(discovery.name, discovery.port) {
                update(to: found, serverName: discovery.name)
            }
            do { try await Task.sleep(for: discovery.refresh) } catch { return }
        }
    }

    /// Makes `found` the replicas: keeps those still there, connects the new ones, closes those gone.
    func update(to found: [RPCEndpoint], serverName: String) {
        let known = Set(replicas.map(\.endpoint))
        // Made outside the lock: a TLS context reads its files.
        let new = found.filter { !known.contains($0) }.compactMap { endpoint in
            (try? Self.backend(
                endpoint: endpoint, transport: transport, tls: tls, serverName: serverName,
                eventLoopGroup: eventLoopGroup))
                .map { Replica(endpoint: endpoint, backend: $0) }
        }
        let wanted = Set(found)
        let (added, removed) = members.withLock { members -> ([Replica], [Replica]) in
            guard !members.closed else { return ([], new) }
            let removed = members.replicas.filter { !wanted.contains($0.endpoint) }
            let added = new.filter { replica in !members.replicas.contains { $0.endpoint == replica.endpoint } }
            members.replicas = members.replicas.filter { wanted.contains($0.endpoint) } + added
            return (added, removed + new.filter { replica in !added.contains { $0 === replica } })
        }
        for replica in added { if case .grpc(let grpc) = replica.backend { toRun.continuation.yield(grpc) } }
        for replica in removed { Self.close(replica.backend) }
    }

    /// Asks each replica's grpc.health.v1 every ``healthInterval`` until the client closes or the
    /// task is cancelled; SERVING marks it healthy, any other answer or failure not, and so do two
    /// checks in a row unanswered within a second (one late answer on a loaded machine is not a
    /// replica down: marking it so sent calls to the replicas that were).
    private func checkReplicas() async {
        while !Task.isCancelled {
            await withTaskGroup(of: Void.self) { group in
                for replica in replicas {
                    group.addTask {
                        // A reachable replica is checked failing fast: if it is gone it says so
                        // at once, and only one connected but slow runs into the deadline. One
                        // already unreachable is checked waiting for its connection (gRPC
                        // reconnects for a waiting call), so it is seen again the moment it is
                        // back; until then its timeouts keep it unreachable.
                        let reachable = replica.reachable.load(ordering: .relaxed)
                        do {
                            let answer: HealthCheckResponse = try await self.call(
                                HealthMethods.check, try self.encode(HealthCheckRequest(service: "")), requestID: nil,
                                trace: nil,
                                timeout: .seconds(1), failFast: reachable, on: replica.backend)
                            replica.checked(serving: answer.status == .serving)
                        } catch let error as ServiceError where error.code == .deadlineExceeded {
                            if reachable { replica.unanswered() }
                        } catch is LeanClient.NotSent {
                            replica.unreachable()
                        } catch let error as ServiceError where error.code == .unavailable {
                            replica.unreachable()
                        } catch {
                            replica.checked(serving: false)
                        }
                    }
                }
            }
            try? await Task.sleep(for: healthInterval)
        }
    }

    /// Whether each replica answered its last health check (tests, metrics), in the order they came.
    public var replicaHealth: [(endpoint: RPCEndpoint, healthy: Bool)] {
        replicas.map { ($0.endpoint, $0.healthy.load(ordering: .relaxed)) }
    }

    private func callOptions(_ timeout: Duration?, failFast: Bool) -> CallOptions {
        var options = CallOptions.defaults
        options.timeout = timeout ?? defaultTimeout
        // Wait for the service to come up within the deadline, unless another replica could take
        // the call (then fail at once: idempotent calls go to it, see withReplica).
        options.waitForReady = !failFast
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
                .resourceExhausted,
                "\(M.protoName) of \(bytes.count) bytes exceeds the limit of \(RPCLimits.maxMessageBytes)")
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
            if ServiceError.metadataKeys.contains(entry.key), case .string(let value) = entry.value {
                metadata[entry.key] = value
            }
        }
        return ServiceError(StatusCode(error.code), error.message, metadata: metadata)
    }

    private static func metadata(_ requestID: String?, _ trace: PassedOnTrace?) -> Metadata {
        var metadata: Metadata = [:]
        if let requestID { metadata.addString(requestID, forKey: requestIDKey) }
        if let trace {
            metadata.addString(trace.traceparent, forKey: traceParentKey)
            if let state = trace.tracestate { metadata.addString(state, forKey: traceStateKey) }
        }
        return metadata
    }

    private static func leanMetadata(_ requestID: String?, _ trace: PassedOnTrace?) -> [LeanMetadataEntry] {
        var entries: [LeanMetadataEntry] = []
        entries.reserveCapacity(3)
        if let requestID { entries.append(LeanMetadataEntry(key: requestIDKey, value: requestID)) }
        if let trace {
            entries.append(LeanMetadataEntry(key: traceParentKey, value: trace.traceparent))
            if let state = trace.tracestate { entries.append(LeanMetadataEntry(key: traceStateKey, value: state)) }
        }
        return entries
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
