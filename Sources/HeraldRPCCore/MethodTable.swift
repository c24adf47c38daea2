import HeraldModel
public import HeraldProto
import HeraldTelemetry
public import Logging
import NIOPosix
import Tracing

/// What a handler knows about the call it serves.
public struct RPCContext: Sendable {
    /// The caller's request id (metadata `x-request-id`), or a fresh one: it ties together the log
    /// lines of one edge request across every service.
    public var requestID: String
    /// The full method name, "package.Service/Method".
    public var method: String
    /// The caller's W3C trace context (metadata `traceparent`/`tracestate`); read only when tracing is on.
    public var traceParent: String?
    public var traceState: String?
    private let baseLogger: Logger

    public init(
        requestID: String, method: String, logger: Logger, traceParent: String? = nil, traceState: String? = nil
    ) {
        self.requestID = requestID
        self.method = method
        self.baseLogger = logger
        self.traceParent = traceParent
        self.traceState = traceState
    }

    /// Runs a handler in a server span that continues the caller's trace (or starts one) when
    /// tracing is on; as it is when off. A failed call's span carries its status code. Health
    /// checks are never traced: every probe would be a trace of its own.
    func traced<T>(_ body: () async throws -> T) async throws -> T {
        guard let tracer = HeraldTracing.tracer, !HeraldTracing.isHealthCheck(method) else { return try await body() }
        let entering = tracer.entering(
            traceparent: traceParent, tracestate: traceState, in: InstrumentationContext.current ?? .topLevel)
        // Nothing below would send a trace passed on: no binding (``HeraldTracing/callsOut``).
        if case .passOn = entering, !HeraldTracing.callsOut { return try await body() }
        return try await HeraldTracing.run(entering) { parent in
            try await tracer.withSpan(method, context: parent, ofKind: .server) { span in
                if span.isRecording { span.setAttribute("herald.request_id", requestID) }
                return try await HeraldTracing.rpc(span, method: method, body)
            }
        } passOn: {
            try await body()
        }
    }

    /// Records a finished call: its metrics always, and one debug line (method, request id, status,
    /// duration) when debug is on; the logger is only built then.
    func served(start: ContinuousClock.Instant, status: StatusCode, metrics: MethodMetrics) {
        metrics.record(status: status, since: start)
        guard baseLogger.logLevel <= .debug else { return }
        logger.debug(
            "rpc served",
            metadata: [
                "herald.status": "\(status)",
                "herald.duration_us": "\((ContinuousClock.now - start).wholeNanoseconds / 1000)",
            ])
    }

    /// Runs `body` on Swift's global executor, never on an event loop: the way out for the part of
    /// a handler started by ``MethodTable/startOnEventLoop(_:)`` that may wait. Such a task counts
    /// as running on the global executor already, so neither `Task.yield()` nor a `@concurrent`
    /// call moves it (RPCTransportTests shows it); a task of its own does. Where the handler goes
    /// on after it is the runtime's choice: off the loop when the await suspended, still on it when
    /// the task had already finished.
    public func offEventLoop<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        guard MultiThreadedEventLoopGroup.currentEventLoop != nil else { return try await body() }
        return try await Task.detached { try await body() }.value
    }

    /// A logger carrying `herald.request_id` and `herald.rpc` metadata. Built when asked for: most
    /// calls never log, and the metadata would cost every call two allocations.
    public var logger: Logger {
        var logger = baseLogger
        logger[metadataKey: "herald.request_id"] = "\(requestID)"
        logger[metadataKey: "herald.rpc"] = "\(method)"
        // A process that calls no other service never binds a trace passed on (``HeraldTracing/callsOut``),
        // so the logging bootstrap's metadata provider does not see it: its id is added here. When
        // the call is recorded, its span's trace id is the caller's, the one the provider adds too.
        if HeraldTracing.isOn, !HeraldTracing.callsOut, let traceParent,
            let trace = HeraldTracing.parse(traceparent: traceParent, tracestate: nil)
        {
            logger[metadataKey: "trace_id"] = "\(trace.traceID)"
        }
        return logger
    }
}

/// The sending side of a server stream.
public struct ResponseStream<Message: HeraldMessage>: Sendable {
    let sendBytes: @Sendable ([UInt8]) async throws -> Void

    /// Over `sendBytes`, which writes one serialized message: a transport's, or a test's.
    package init(sendBytes: @escaping @Sendable ([UInt8]) async throws -> Void) {
        self.sendBytes = sendBytes
    }

    /// Sends one message; suspends while the transport applies back-pressure.
    public func send(_ message: Message) async throws {
        try await sendBytes(message.serializedBytes())
    }
}

/// Every RPC a service serves, registered once and served by any transport.
///
/// Handlers are plain async functions of Herald message types; grpc-swift never appears in service
/// code. The table stores them type-erased to bytes, which is all a transport needs: the gRPC binding
/// (``GRPCBinding``) serves it over HTTP/2, the lean server (`LeanServer`) over its own framing.
public struct MethodTable: Sendable {
    /// A type-erased handler.
    public enum Handler: Sendable {
        case unary(@Sendable (_ request: [UInt8], _ context: RPCContext) async throws -> [UInt8])
        case serverStreaming(
            @Sendable (
                _ request: [UInt8], _ context: RPCContext, _ send: @escaping @Sendable ([UInt8]) async throws -> Void
            ) async throws -> Void
        )
    }

    /// Handlers by full method name.
    public private(set) var handlers: [String: Handler] = [:]
    /// Service names in registration order (health reports on each).
    public private(set) var services: [String] = []
    /// Methods the lean server starts on the connection's event loop (`Task.immediate`) instead of
    /// on Swift's cooperative pool; see ``startOnEventLoop(_:)``.
    public private(set) var eventLoopMethods: Set<String> = []

    public init() {}

    /// Registers a unary handler. Registering a method twice is a programming error. Services
    /// register through their generated `<Service>Handler` protocol; this is its way in.
    package mutating func register<Request, Response>(
        _ method: UnaryMethod<Request, Response>,
        _ handler: @escaping @Sendable (Request, RPCContext) async throws -> Response
    ) {
        insert(method.fullName, service: method.service) {
            let metrics = MethodMetrics(method: method.fullName)
            return .unary { bytes, context in
                let start = ContinuousClock.now
                do {
                    let response: [UInt8] = try await context.traced {
                        try await handler(try Self.decode(Request.self, bytes), context)
                    }
                    .serializedBytes()
                    context.served(start: start, status: .ok, metrics: metrics)
                    return response
                } catch {
                    context.served(start: start, status: ServiceError.from(error).error.code, metrics: metrics)
                    throw error
                }
            }
        }
    }

    /// Registers a server-streaming handler.
    package mutating func register<Request, Response>(
        _ method: ServerStreamingMethod<Request, Response>,
        _ handler: @escaping @Sendable (Request, RPCContext, ResponseStream<Response>) async throws -> Void
    ) {
        insert(method.fullName, service: method.service) {
            let metrics = MethodMetrics(method: method.fullName)
            return .serverStreaming { bytes, context, send in
                let start = ContinuousClock.now
                do {
                    let request = try Self.decode(Request.self, bytes)
                    try await context.traced { try await handler(request, context, ResponseStream(sendBytes: send)) }
                    context.served(start: start, status: .ok, metrics: metrics)
                } catch {
                    context.served(start: start, status: ServiceError.from(error).error.code, metrics: metrics)
                    throw error
                }
            }
        }
    }

    /// Lets the lean server start `method`'s handler on the event loop that read the request: it
    /// runs there until its first suspension, and its answer is written without a hop back. That
    /// spares two thread wake-ups per call, about a third of the server's CPU on a cheap call
    /// (`herald-bench rpc`).
    ///
    /// Only for handlers whose synchronous part is short and never waits: memory, or a read of a
    /// WAL-mode SQLite database (readers never wait for the writer). Anything that may wait, such
    /// as a write, a password hash or a call to another service, must be behind an `await` that
    /// leaves the loop (``RPCContext/offEventLoop(_:)``, or work handed to a thread pool), or the
    /// connection's other calls wait with it.
    public mutating func startOnEventLoop<Request, Response>(_ method: UnaryMethod<Request, Response>) {
        // trap-ok: a lookup of a method Herald declares in code, at start.
        precondition(handlers[method.fullName] != nil, "\(method.fullName) is not registered")
        eventLoopMethods.insert(method.fullName)
    }

    private mutating func insert(_ name: String, service: String, _ make: () -> Handler) {
        // trap-ok: registration happens once at start, from code.
        precondition(handlers[name] == nil, "\(name) registered twice")
        handlers[name] = make()
        if !services.contains(service) { services.append(service) }
    }

    private static func decode<M: HeraldMessage>(_ type: M.Type, _ bytes: [UInt8]) throws -> M {
        do {
            return try M(serializedBytes: bytes)
        } catch {
            throw ServiceError.invalidArgument("request is not a valid \(M.protoName)")
        }
    }
}
