import Foundation
import HeraldModel
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A client of the lean protocol (docs/rpc-protocol.md) over one multiplexed Unix-socket connection.
///
/// The connection is opened on first use and again after it is lost or the server sent GOAWAY;
/// while the service is unreachable, a call keeps trying (with backoff) until its deadline, so
/// services may start in any order and restart without callers seeing more than a delay.
final class LeanClient: Sendable {
    let socketPath: String
    let maxFrameBytes: Int
    /// MESSAGE frames a stream may have in flight; half of it is granted back as it is consumed.
    static let streamWindow: UInt32 = 256

    private struct State {
        var connection: LeanConnection?
        var connecting: Task<LeanConnection, any Error>?
        var closed = false
    }

    private let state = Mutex(State())

    private enum Next {
        case ready(LeanConnection)
        case connecting(Task<LeanConnection, any Error>)
    }

    /// Where it connects: a Unix socket, or TCP wrapped in `tls`.
    let endpoint: RPCEndpoint
    let tls: NIOSSLContext?

    init(endpoint: RPCEndpoint, tls: NIOSSLContext?, maxFrameBytes: Int = LeanProtocol.defaultMaxFrameBytes) {
        self.endpoint = endpoint
        self.tls = tls
        self.socketPath = endpoint.description
        self.maxFrameBytes = maxFrameBytes
    }

    /// Takes no new calls, and closes the connection once the calls under way have finished (like
    /// gRPC's graceful shutdown: closing at once would drop answers already on their way).
    func close() {
        let connection = state.withLock { state in
            state.closed = true
            state.connecting?.cancel()
            return state.connection
        }
        guard let connection else { return }
        let channel = connection.channel
        connection.calls.whenIdle { channel.close(promise: nil) }
    }

    /// Makes one call; hands each response message to `onMessage`. `window` 0 for unary calls.
    func call(
        method: String, request: [UInt8], metadata: [LeanMetadataEntry], timeout: Duration, window: UInt32,
        onMessage: ([UInt8]) async throws -> Void
    ) async throws {
        let deadline = ContinuousClock.now + timeout
        let milliseconds = UInt32(clamping: max(1, timeout.wholeMilliseconds))
        let head = LeanRequest(
            timeoutMilliseconds: milliseconds, window: window, method: method, metadata: metadata,
            message: ByteBuffer(bytes: request))
        let requestBytes = try head.frame(callID: 1).encoded()
        guard requestBytes.readableBytes - 4 <= maxFrameBytes else {
            throw ServiceError(
                .resourceExhausted, "request of \(requestBytes.readableBytes) bytes exceeds the frame limit of \(maxFrameBytes)")
        }

        let connection = try await connection(deadline: deadline)
        let (frames, continuation) = AsyncThrowingStream<LeanFrame, any Error>.makeStream()
        guard let id = connection.calls.open(continuation) else {
            throw ServiceError(.unavailable, "connection to \(socketPath) is closing; retry")
        }
        defer { connection.calls.remove(id) }
        var out = requestBytes
        out.setInteger(id, at: out.readerIndex + 6)  // the call id field of the already encoded frame
        let timer = connection.channel.eventLoop.scheduleTask(deadline: .now() + .nanoseconds(max(0, (deadline - .now).wholeNanoseconds))) {
            continuation.finish(throwing: ServiceError(.deadlineExceeded, "deadline exceeded"))
        }
        defer { timer.cancel() }
        connection.channel.writeAndFlush(out, promise: nil)

        var ended = false
        do {
            try await withTaskCancellationHandler {
                var consumed: UInt32 = 0
                for try await frame in frames {
                    switch frame.kind {
                    case .message:
                        try await onMessage(Array(frame.payload.readableBytesView))
                        consumed += 1
                        if window > 0, consumed == window / 2 {
                            connection.channel.writeAndFlush(LeanFrame.window(callID: id, credits: consumed).encoded(), promise: nil)
                            consumed = 0
                        }
                    case .end:
                        ended = true
                        let (code, message, metadata) = try frame.status()
                        if code != .ok { throw ServiceError(code, message, metadata: metadata) }
                        return
                    default:
                        throw ServiceError(.internal, "unexpected \(frame.kind) frame for a call")
                    }
                }
                throw ServiceError(.unavailable, "connection to \(socketPath) closed during the call")
            } onCancel: {
                continuation.finish(throwing: CancellationError())
            }
        } catch {
            if !ended, connection.channel.isActive {
                connection.channel.writeAndFlush(LeanFrame(.cancel, callID: id).encoded(), promise: nil)
            }
            throw error
        }
    }

    /// A usable connection, opening one (retrying until `deadline`) when there is none.
    private func connection(deadline: ContinuousClock.Instant) async throws -> LeanConnection {
        var backoff = Duration.milliseconds(20)
        while true {
            // The common case, an open connection, costs one lock and no task.
            let next: Next = try state.withLock { state in
                if state.closed { throw ServiceError(.unavailable, "client of \(socketPath) is closed") }
                if let connection = state.connection, connection.isUsable { return .ready(connection) }
                if let connecting = state.connecting { return .connecting(connecting) }
                let task = Task { [endpoint, tls, maxFrameBytes] in
                    try await LeanConnection.open(endpoint: endpoint, tls: tls, maxFrameBytes: maxFrameBytes)
                }
                state.connecting = task
                return .connecting(task)
            }
            let pending: Task<LeanConnection, any Error>
            switch next {
            case .ready(let connection): return connection
            case .connecting(let task): pending = task
            }
            let failure: String
            do {
                let connection = try await pending.value
                state.withLock { state in
                    if state.connection !== connection, connection.isUsable { state.connection = connection }
                    state.connecting = nil
                }
                if connection.isUsable { return connection }
                // Opened, then closed or told to go away at once (a server shutting down): try
                // again, but within the deadline like any other failure, or the call would wait
                // past it with no timer armed yet.
                failure = "the connection closed as soon as it opened"
            } catch {
                state.withLock { $0.connecting = nil }
                if error is CancellationError || Task.isCancelled { throw error }
                failure = "\(error)"
            }
            guard ContinuousClock.now + backoff < deadline else {
                throw ServiceError(.unavailable, "cannot reach \(socketPath): \(failure)")
            }
            try await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(1))
        }
    }
}

/// One connection and the calls open on it.
final class LeanConnection: Sendable {
    let channel: any Channel
    let calls: LeanCallTable

    init(channel: any Channel, calls: LeanCallTable) {
        self.channel = channel
        self.calls = calls
    }

    var isUsable: Bool { channel.isActive && calls.acceptsCalls }

    static func open(endpoint: RPCEndpoint, tls: NIOSSLContext?, maxFrameBytes: Int) async throws -> LeanConnection {
        let calls = LeanCallTable()
        var serverHostname: String?
        if case .tcp(let host, _) = endpoint, !RPCEndpoint.isIPLiteral(host) { serverHostname = host }
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(2))
            .channelInitializer { [serverHostname] channel in
                channel.eventLoop.makeCompletedFuture {
                    let operations = channel.pipeline.syncOperations
                    if let tls { try operations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: serverHostname)) }
                    try operations.addHandler(LeanPrefaceWriter())
                    try operations.addHandler(ByteToMessageHandler(LeanFrameDecoder(maxFrameBytes: maxFrameBytes)))
                    try operations.addHandler(LeanClientHandler(calls: calls))
                }
            }
        let channel: any Channel
        switch endpoint {
        case .unix(let path):
            channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
        case .tcp(let host, let port):
            channel = try await bootstrap.connect(host: host, port: port).get()
        }
        return LeanConnection(channel: channel, calls: calls)
    }
}

/// The calls open on one connection, by call id. Frames are routed here on the event loop; calls
/// are opened and closed from callers' tasks.
final class LeanCallTable: Sendable {
    private struct State {
        var calls: [UInt32: AsyncThrowingStream<LeanFrame, any Error>.Continuation] = [:]
        var nextID: UInt32 = 1
        var goaway = false
        var closed = false
        /// Set by a draining client: runs once no call is open.
        var onIdle: (@Sendable () -> Void)?

        /// The idle action, taken, when it is due.
        mutating func idleActionIfDue() -> (@Sendable () -> Void)? {
            guard calls.isEmpty, let action = onIdle else { return nil }
            onIdle = nil
            return action
        }
    }

    private let state = Mutex(State())

    var acceptsCalls: Bool { state.withLock { !$0.goaway && !$0.closed } }

    /// Registers a call and returns its id; nil when the connection takes no new calls.
    func open(_ continuation: AsyncThrowingStream<LeanFrame, any Error>.Continuation) -> UInt32? {
        state.withLock { state in
            guard !state.goaway, !state.closed else { return nil }
            var id = state.nextID
            while id == 0 || state.calls[id] != nil { id &+= 1 }
            state.nextID = id &+ 1
            state.calls[id] = continuation
            return id
        }
    }

    func remove(_ id: UInt32) {
        let idle = state.withLock { state in
            state.calls.removeValue(forKey: id)
            return state.idleActionIfDue()
        }
        idle?()
    }

    /// Takes no new calls and runs `action` once every open call has ended (at once if none is open).
    func whenIdle(_ action: @escaping @Sendable () -> Void) {
        let idle = state.withLock { state in
            state.goaway = true
            state.onIdle = action
            return state.idleActionIfDue()
        }
        idle?()
    }

    func route(_ frame: LeanFrame) {
        switch frame.kind {
        case .message:
            _ = state.withLock { $0.calls[frame.callID] }?.yield(frame)
        case .end:
            let (call, idle) = state.withLock { state in
                (state.calls.removeValue(forKey: frame.callID), state.idleActionIfDue())
            }
            if let call {
                call.yield(frame)
                call.finish()
            }
            idle?()
        case .goaway:
            state.withLock { $0.goaway = true }
        default:
            break
        }
    }

    /// Fails every open call (the connection is gone).
    func failAll(_ error: ServiceError) {
        let calls = state.withLock { state in
            state.closed = true
            defer { state.calls.removeAll() }
            return Array(state.calls.values)
        }
        for call in calls { call.finish(throwing: error) }
    }
}

/// Routes a connection's frames to its calls.
final class LeanClientHandler: ChannelInboundHandler {
    typealias InboundIn = LeanFrame
    typealias OutboundOut = ByteBuffer
    private let calls: LeanCallTable

    init(calls: LeanCallTable) {
        self.calls = calls
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if frame.kind == .error {
            let message = (try? frame.status().message) ?? "protocol error"
            calls.failAll(ServiceError(.unavailable, "server closed the connection: \(message)"))
            context.close(promise: nil)
            return
        }
        calls.route(frame)
    }

    func channelInactive(context: ChannelHandlerContext) {
        calls.failAll(ServiceError(.unavailable, "connection closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        calls.failAll(ServiceError(.unavailable, "connection failed: \(error)"))
        context.close(promise: nil)
    }
}
