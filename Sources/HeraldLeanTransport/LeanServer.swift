import Foundation
import HeraldModel
public import HeraldRPCCore
import HeraldTelemetry
public import Logging
import NIOCore
public import NIOPosix
import NIOSSL
public import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Serves a ``MethodTable`` over the lean protocol (docs/rpc-protocol.md) on a Unix socket.
///
/// Built on SwiftNIO: one channel handler per connection decodes frames on the event loop and runs
/// each call's handler in a task. On graceful shutdown it stops accepting, sends GOAWAY on every
/// connection, lets in-flight calls finish, and removes the socket.
public final class LeanServer: Service {
    private let table: MethodTable
    private let maxFrameBytes: Int
    private let logger: Logger
    private let health: (any DrainObserver)?
    private let onListening: @Sendable () -> Void
    private let connections = LeanConnections()
    private let peers: PeerPolicy?
    private let endpoint: RPCEndpoint
    private let tls: NIOSSLContext?
    private let eventLoopGroup: MultiThreadedEventLoopGroup

    /// With `peers`, a connection from a process the policy does not allow is kept open but every
    /// call on it ends PERMISSION_DENIED (and the refusal is logged once per connection).
    public convenience init(
        table: MethodTable, socketPath: String, maxFrameBytes: Int = LeanProtocol.defaultMaxFrameBytes,
        logger: Logger, health: (any DrainObserver)? = nil, peers: PeerPolicy? = nil,
        eventLoopGroup: MultiThreadedEventLoopGroup = .singleton,
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        self.init(
            table: table, endpoint: .unix(socketPath), tls: nil, maxFrameBytes: maxFrameBytes, logger: logger,
            health: health, peers: peers, eventLoopGroup: eventLoopGroup, onListening: onListening)
    }

    /// On TCP, `tls` wraps every connection (peer credentials only apply to Unix sockets).
    /// `eventLoopGroup` is where its connections run: NIO's shared loops unless a caller that
    /// shares a process with other busy servers (a test) gives it loops of its own.
    public init(
        table: MethodTable, endpoint: RPCEndpoint, tls: NIOSSLContext?,
        maxFrameBytes: Int = LeanProtocol.defaultMaxFrameBytes,
        logger: Logger, health: (any DrainObserver)? = nil, peers: PeerPolicy? = nil,
        eventLoopGroup: MultiThreadedEventLoopGroup = .singleton,
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        self.eventLoopGroup = eventLoopGroup
        self.endpoint = endpoint
        self.tls = tls
        self.peers = peers
        self.table = table
        self.health = health
        self.maxFrameBytes = maxFrameBytes
        self.logger = logger
        self.onListening = onListening
    }

    public func run() async throws {
        let table = self.table
        let logger = self.logger
        let maxFrameBytes = self.maxFrameBytes
        let connections = self.connections
        let isUnix = endpoint.unixPath != nil
        let peers = isUnix ? self.peers : nil
        let tls = self.tls
        let bootstrap = ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: isUnix ? 0 : 1)
            .childChannelInitializer { channel in
                let check = peers?.refusal(for: channel) ?? channel.eventLoop.makeSucceededFuture(nil)
                return check.flatMapThrowing { refusal in
                    if let refusal {
                        logger.warning("refused a caller (lean)", metadata: ["herald.peer": "\(refusal)"])
                    }
                    let operations = channel.pipeline.syncOperations
                    if let tls { try operations.addHandler(NIOSSLServerHandler(context: tls)) }
                    try operations.addHandler(LeanPrefaceWriter())
                    try operations.addHandler(ByteToMessageHandler(LeanFrameDecoder(maxFrameBytes: maxFrameBytes)))
                    try operations.addHandler(LeanServerHandler(table: table, logger: logger, refusal: refusal))
                    connections.add(channel)
                }
            }
        let server: any Channel
        do {
            switch endpoint {
            case .unix(let path):
                server = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true).get()
                chmod(path, 0o660)
            case .tcp(let host, let port):
                server = try await bootstrap.bind(host: host, port: port).get()
            }
        } catch {
            // NIO's error names the system call, not the address: say which listener failed.
            throw ServiceError(.unavailable, "cannot listen on \(endpoint): \(error)")
        }
        defer { if let path = endpoint.unixPath { unlink(path) } }
        logger.info("listening (lean)", metadata: ["herald.endpoint": "\(endpoint)", "herald.tls": "\(tls != nil)"])
        onListening()
        await withGracefulShutdownHandler {
            // A future's get() does not end when the task is cancelled: without the handler, a group
            // that cancels instead of draining (a sibling service failed) waited here for ever.
            await withTaskCancellationHandler {
                try? await server.closeFuture.get()
            } onCancel: {
                server.close(promise: nil)
            }
        } onGracefulShutdown: { [health] in
            health?.beginDraining()
            server.close(promise: nil)
            connections.drainAll()
        }
        await connections.waitUntilClosed()
    }
}

/// The open connections of a server, so shutdown can drain them.
final class LeanConnections: Sendable {
    private let channels = Mutex<[ObjectIdentifier: any Channel]>([:])

    func add(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        channels.withLock { $0[id] = channel }
        channel.closeFuture.whenComplete { [self] _ in _ = channels.withLock { $0.removeValue(forKey: id) } }
    }

    func drainAll() {
        for channel in channels.withLock({ Array($0.values) }) {
            channel.pipeline.fireUserInboundEventTriggered(LeanServerHandler.Drain())
        }
    }

    /// Waits for every connection to close; closes them at once if the wait is cancelled (the
    /// drain timeout ran out).
    func waitUntilClosed() async {
        await withTaskCancellationHandler {
            for channel in channels.withLock({ Array($0.values) }) {
                try? await channel.closeFuture.get()
            }
        } onCancel: {
            for channel in channels.withLock({ Array($0.values) }) { channel.close(promise: nil) }
        }
    }
}

/// One in-flight call on the server.
final class LeanServerCall: Sendable {
    /// Flow control of a stream; nil for calls with no window (unary), which send one message.
    let credits: CreditGate?
    private let state = Mutex<(task: Task<Void, Never>?, deadlineExpired: Bool)>((nil, false))

    init(window: UInt32) {
        credits = window == 0 ? nil : CreditGate(window: window)
    }

    func start(_ task: Task<Void, Never>) {
        state.withLock { $0.task = task }
    }

    func cancel(deadline: Bool = false) {
        let task = state.withLock { state in
            if deadline { state.deadlineExpired = true }
            return state.task
        }
        credits?.cancel()
        task?.cancel()
    }

    var deadlineExpired: Bool { state.withLock { $0.deadlineExpired } }
}

/// Per-connection protocol state; all of it lives on the channel's event loop.
final class LeanServerHandler: ChannelInboundHandler {
    typealias InboundIn = LeanFrame
    typealias OutboundOut = ByteBuffer

    /// Fired by the server on graceful shutdown.
    struct Drain {}

    private let table: MethodTable
    private let logger: Logger
    private var calls: [UInt32: LeanServerCall] = [:]
    /// The deadline timers of calls still running (none for a call that finished as it started).
    private var timers: [UInt32: Scheduled<Void>] = [:]
    private var draining = false
    /// The client's preface allows END trailers (error metadata such as `retry-after`).
    private var peerAcceptsTrailers = false
    /// Why this connection's peer may not call (``PeerPolicy``); nil when it may.
    private let refusal: String?

    init(table: MethodTable, logger: Logger, refusal: String? = nil) {
        self.table = table
        self.logger = logger
        self.refusal = refusal
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.kind {
        case .request:
            startCall(context: context, frame: frame)
        case .cancel:
            calls[frame.callID]?.cancel()
        case .window:
            do {
                calls[frame.callID]?.credits?.grant(try frame.credits())
            } catch {
                fail(context: context, error)
            }
        default:
            fail(context: context, LeanProtocolError("a client may not send \(frame.kind) frames"))
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let preface = event as? LeanPeerPreface {
            peerAcceptsTrailers = preface.acceptsEndTrailers
            return
        }
        guard event is Drain else { return context.fireUserInboundEventTriggered(event) }
        draining = true
        context.writeAndFlush(wrapOutboundOut(LeanFrame(.goaway, callID: 0).encoded()), promise: nil)
        if calls.isEmpty { context.close(promise: nil) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        // The caller went away: nobody is waiting for these answers any more.
        for call in calls.values { call.cancel() }
        calls.removeAll()
        for timer in timers.values { timer.cancel() }
        timers.removeAll()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(context: context, error)
    }

    /// A connection-level error: tell the peer why, then close.
    private func fail(context: ChannelHandlerContext, _ error: any Error) {
        let message = (error as? LeanProtocolError)?.description ?? "\(error)"
        logger.warning("lean connection closed on a protocol error", metadata: ["herald.error": "\(message)"])
        context.writeAndFlush(
            wrapOutboundOut(LeanFrame.status(.error, callID: 0, code: .invalidArgument, message: message).encoded()),
            promise: nil)
        context.close(promise: nil)
    }

    private func startCall(context: ChannelHandlerContext, frame: LeanFrame) {
        let id = frame.callID
        let channel = context.channel
        func end(_ code: StatusCode, _ message: String) {
            context.writeAndFlush(
                wrapOutboundOut(LeanFrame.status(.end, callID: id, code: code, message: message).encoded()),
                promise: nil)
        }
        guard id != 0, calls[id] == nil else {
            return fail(context: context, LeanProtocolError("call id \(id) is zero or already in use"))
        }
        if let refusal { return end(.permissionDenied, refusal) }
        guard !draining else { return end(.unavailable, "server is shutting down; reconnect") }
        let request: LeanRequest
        do {
            request = try LeanRequest.parse(frame)
        } catch {
            return end(.invalidArgument, "\(error)")
        }
        guard request.message.readableBytes <= RPCLimits.maxMessageBytes else {
            return end(.resourceExhausted, "request exceeds the limit of \(RPCLimits.maxMessageBytes) bytes")
        }
        guard let handler = table.handlers[request.method] else {
            return end(.unimplemented, "method \(request.method) is not implemented by this server")
        }
        let requestID = request.metadata.first { $0.key == requestIDKey }?.value ?? newRequestID()
        var rpcContext = RPCContext(requestID: requestID, method: request.method, logger: logger)
        if HeraldTracing.isOn {
            rpcContext.traceParent = request.metadata.first { $0.key == traceParentKey }?.value
            rpcContext.traceState = request.metadata.first { $0.key == traceStateKey }?.value
        }
        let call = LeanServerCall(window: request.window)
        calls[id] = call
        let input = Array(request.message.readableBytesView)
        let loop = context.eventLoop
        let handlerBox = NIOLoopBound(self, eventLoop: loop)
        // One trip to the event loop ends the call (none when the handler finished on it): write
        // its last frames, forget it and cancel its timer.
        let finish: @Sendable (ByteBuffer) -> Void = { frames in
            let end = {
                channel.writeAndFlush(frames, promise: nil)
                handlerBox.value.finished(id, channel: channel)
            }
            if loop.inEventLoop { end() } else { loop.execute(end) }
        }
        call.start(
            LeanCallRunner.start(
                handler, input: input, context: rpcContext, call: call, id: id, trailers: peerAcceptsTrailers,
                channel: channel,
                onEventLoop: table.eventLoopMethods.contains(request.method), finish: finish))
        // A handler started on the event loop that did not wait has ended its call already: no
        // timer to arm and cancel (a tenth of a lean echo's instructions, measured with callgrind).
        if request.timeoutMilliseconds != 0, calls[id] === call {
            timers[id] = context.eventLoop.scheduleTask(in: .milliseconds(Int64(request.timeoutMilliseconds))) {
                call.cancel(deadline: true)
            }
        }
    }

    private func finished(_ id: UInt32, channel: any Channel) {
        calls[id] = nil
        timers.removeValue(forKey: id)?.cancel()
        if draining, calls.isEmpty { channel.close(promise: nil) }
    }

}

/// Runs calls' handlers: in a task on the cooperative pool, or started on the event loop for the
/// methods a table lists in ``MethodTable/eventLoopMethods``.
enum LeanCallRunner {
    static func start(
        _ handler: MethodTable.Handler, input: [UInt8], context: RPCContext, call: LeanServerCall, id: UInt32,
        trailers: Bool, channel: any Channel, onEventLoop: Bool, finish: @escaping @Sendable (ByteBuffer) -> Void
    ) -> Task<Void, Never> {
        guard onEventLoop else {
            return Task {
                finish(
                    await run(
                        handler, input: input, context: context, call: call, id: id, trailers: trailers,
                        channel: channel))
            }
        }
        return Task.immediate {
            finish(
                await run(
                    handler, input: input, context: context, call: call, id: id, trailers: trailers, channel: channel))
        }
    }

    /// A response the client could not take fails the call instead of the connection.
    private static func checkSize(_ response: [UInt8]) throws {
        guard response.count <= RPCLimits.maxMessageBytes else {
            throw ServiceError(.resourceExhausted, "response exceeds the limit of \(RPCLimits.maxMessageBytes) bytes")
        }
    }

    /// Runs one handler; returns the bytes that finish the call (the last MESSAGE, if any, and END).
    private static func run(
        _ handler: MethodTable.Handler, input: [UInt8], context: RPCContext, call: LeanServerCall, id: UInt32,
        trailers: Bool, channel: any Channel
    ) async -> ByteBuffer {
        var out = ByteBuffer()
        do {
            switch handler {
            case .unary(let handle):
                let response = try await handle(input, context)
                try checkSize(response)
                LeanFrame(.message, callID: id, payload: ByteBuffer(bytes: response)).write(to: &out)
            case .serverStreaming(let handle):
                try await handle(input, context) { bytes in
                    try checkSize(bytes)
                    try await call.credits?.acquire()
                    channel.writeAndFlush(
                        LeanFrame(.message, callID: id, payload: ByteBuffer(bytes: bytes)).encoded(), promise: nil)
                }
            }
            LeanFrame.status(.end, callID: id, code: .ok, message: "").write(to: &out)
        } catch {
            let status =
                call.deadlineExpired
                ? ServiceError(.deadlineExceeded, "deadline exceeded") : ServiceError.answering(error, in: context)
            LeanFrame.status(
                .end, callID: id, code: status.code, message: status.message, metadata: trailers ? status.metadata : [:]
            )
            .write(to: &out)
        }
        return out
    }
}
