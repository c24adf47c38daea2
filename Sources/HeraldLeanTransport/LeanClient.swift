import Foundation
import HeraldModel
public import HeraldRPCCore
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A client of the lean protocol (docs/rpc-protocol.md) over one multiplexed Unix-socket connection.
///
/// The connection is opened on first use and again after it is lost or the server sent GOAWAY;
/// while the service is unreachable, a call keeps trying (with backoff) until its deadline, so
/// services may start in any order and restart without callers seeing more than a delay.
package final class LeanClient: Sendable {
    let socketPath: String
    let maxFrameBytes: Int
    /// MESSAGE frames a stream may have in flight; half of it is granted back as it is consumed.
    package static let streamWindow: UInt32 = 256

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
    /// The name TLS checks the server's certificate against (and sends as SNI) when `endpoint` is
    /// an address resolved from it; nil: the endpoint's own host.
    let serverName: String?
    /// The loops its connection runs on.
    let eventLoopGroup: MultiThreadedEventLoopGroup

    /// A call that never left: this replica could not be reached. Any call may be tried elsewhere.
    package struct NotSent: Error {
        package let error: ServiceError
    }

    package init(
        endpoint: RPCEndpoint, tls: NIOSSLContext?, serverName: String? = nil,
        maxFrameBytes: Int = LeanProtocol.defaultMaxFrameBytes, eventLoopGroup: MultiThreadedEventLoopGroup = .singleton
    ) {
        self.eventLoopGroup = eventLoopGroup
        self.endpoint = endpoint
        self.tls = tls
        self.serverName = serverName
        self.socketPath = endpoint.description
        self.maxFrameBytes = maxFrameBytes
    }

    /// Takes no new calls, and closes the connection once the calls under way have finished (like
    /// gRPC's graceful shutdown: closing at once would drop answers already on their way).
    package func close() {
        let connection = state.withLock { state in
            state.closed = true
            state.connecting?.cancel()
            return state.connection
        }
        guard let connection else { return }
        let channel = connection.channel
        connection.calls.whenIdle { channel.close(promise: nil) }
    }

    /// Makes one unary call; returns its response message.
    ///
    /// The common call, so it has its own path: one continuation, resumed by the END frame (or by
    /// the deadline, a cancellation or the connection's loss, whichever comes first), where a
    /// stream would cost an `AsyncThrowingStream` per call. Measured by `herald-bench
    /// instructions`: the stream's machinery was a third of the edge's instructions per GET.
    ///
    /// With `failFast` (another replica can take it), a failed connect ends the call at once with
    /// ``NotSent`` instead of retrying this service until the deadline.
    package func unary(
        method: String, request: [UInt8], metadata: [LeanMetadataEntry], timeout: Duration, failFast: Bool = false
    ) async throws -> [UInt8] {
        let deadline = ContinuousClock.now + timeout
        var frame = try encodeRequest(method: method, request: request, metadata: metadata, timeout: timeout, window: 0)
        let connection = try await connection(deadline: deadline, failFast: failFast)
        let calls = connection.calls
        guard let id = calls.reserveUnary() else {
            throw NotSent(error: ServiceError(.unavailable, "connection to \(socketPath) is closing; retry"))
        }
        frame.setInteger(id, at: frame.readerIndex + 6)  // the call id field of the already encoded frame
        let channel = connection.channel
        let timer = channel.eventLoop.scheduleTask(
            deadline: .now() + .nanoseconds(max(0, (deadline - .now).wholeNanoseconds))
        ) {
            calls.fail(id, ServiceError(.deadlineExceeded, "deadline exceeded"))
        }
        defer { timer.cancel() }
        let answer: LeanCallTable.UnaryAnswer
        do {
            answer = try await withTaskCancellationHandler {
                try await withUnsafeThrowingContinuation { continuation in
                    // The request goes out only once its answer has somewhere to go. Until the
                    // write completes the call counts as not sent: lost with the connection before
                    // then, another replica may take it, whatever the method.
                    if calls.arm(id, continuation) {
                        channel.writeAndFlush(frame).whenComplete { result in calls.written(id, result) }
                    }
                }
            } onCancel: {
                calls.fail(id, CancellationError())
            }
        } catch {
            // Ended here, not by the server: tell it to stop working on the call.
            if channel.isActive { channel.writeAndFlush(LeanFrame(.cancel, callID: id).encoded(), promise: nil) }
            throw error
        }
        let (code, message, trailers) = try answer.end.status()
        if code != .ok { throw ServiceError(code, message, metadata: trailers) }
        guard let response = answer.message else { throw ServiceError(.internal, "\(method) ended without a response") }
        return Array(response.readableBytesView)
    }

    /// The REQUEST frame of a call, with call id 1 (the caller sets the real one).
    private func encodeRequest(
        method: String, request: [UInt8], metadata: [LeanMetadataEntry], timeout: Duration, window: UInt32
    ) throws -> ByteBuffer {
        let milliseconds = UInt32(clamping: max(1, timeout.wholeMilliseconds))
        let head = LeanRequest(
            timeoutMilliseconds: milliseconds, window: window, method: method, metadata: metadata,
            message: ByteBuffer(bytes: request))
        let requestBytes = try head.frame(callID: 1).encoded()
        guard requestBytes.readableBytes - 4 <= maxFrameBytes else {
            throw ServiceError(
                .resourceExhausted,
                "request of \(requestBytes.readableBytes) bytes exceeds the frame limit of \(maxFrameBytes)")
        }
        return requestBytes
    }

    /// Makes one streaming call; hands each response message to `onMessage`.
    package func call(
        method: String, request: [UInt8], metadata: [LeanMetadataEntry], timeout: Duration, window: UInt32,
        failFast: Bool = false,
        onMessage: ([UInt8]) async throws -> Void
    ) async throws {
        let deadline = ContinuousClock.now + timeout
        let requestBytes = try encodeRequest(
            method: method, request: request, metadata: metadata, timeout: timeout, window: window)
        let connection = try await connection(deadline: deadline, failFast: failFast)
        let (frames, continuation) = AsyncThrowingStream<LeanFrame, any Error>.makeStream()
        guard let id = connection.calls.open(continuation) else {
            throw ServiceError(.unavailable, "connection to \(socketPath) is closing; retry")
        }
        defer { connection.calls.remove(id) }
        var out = requestBytes
        out.setInteger(id, at: out.readerIndex + 6)  // the call id field of the already encoded frame
        let timer = connection.channel.eventLoop.scheduleTask(
            deadline: .now() + .nanoseconds(max(0, (deadline - .now).wholeNanoseconds))
        ) {
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
                            connection.channel.writeAndFlush(
                                LeanFrame.window(callID: id, credits: consumed).encoded(), promise: nil)
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
    private func connection(deadline: ContinuousClock.Instant, failFast: Bool) async throws -> LeanConnection {
        var backoff = Duration.milliseconds(20)
        while true {
            // The common case, an open connection, costs one lock and no task.
            let next: Next = try state.withLock { state in
                if state.closed { throw ServiceError(.unavailable, "client of \(socketPath) is closed") }
                if let connection = state.connection, connection.isUsable { return .ready(connection) }
                if let connecting = state.connecting { return .connecting(connecting) }
                let task = Task { [endpoint, tls, maxFrameBytes, eventLoopGroup] in
                    try await LeanConnection.open(
                        endpoint: endpoint, tls: tls, serverName: serverName, maxFrameBytes: maxFrameBytes,
                        eventLoopGroup: eventLoopGroup)
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
            if failFast { throw NotSent(error: ServiceError(.unavailable, "cannot reach \(socketPath): \(failure)")) }
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

    static func open(
        endpoint: RPCEndpoint, tls: NIOSSLContext?, serverName: String? = nil, maxFrameBytes: Int,
        eventLoopGroup: MultiThreadedEventLoopGroup
    ) async throws -> LeanConnection {
        let calls = LeanCallTable()
        var serverHostname = serverName
        if serverHostname == nil, case .tcp(let host, _) = endpoint, !RPCEndpoint.isIPLiteral(host) {
            serverHostname = host
        }
        let bootstrap = ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(.seconds(2))
            .channelInitializer { [serverHostname] channel in
                channel.eventLoop.makeCompletedFuture {
                    let operations = channel.pipeline.syncOperations
                    if let tls {
                        try operations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: serverHostname))
                    }
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
    /// What a unary call gets back: its MESSAGE's payload, if any, and its END frame.
    struct UnaryAnswer: Sendable {
        var message: ByteBuffer?
        var end: LeanFrame
    }

    /// A call waiting for frames.
    private enum Waiter {
        /// A streaming call: every frame goes to its stream.
        case stream(AsyncThrowingStream<LeanFrame, any Error>.Continuation)
        /// A unary call: reserved, then armed with its continuation; the MESSAGE is kept until END.
        /// `failure` is set when it failed before it was armed (cancelled at once).
        case unary(UnsafeContinuation<UnaryAnswer, any Error>?, message: ByteBuffer?, failure: (any Error)?)
    }

    private struct State {
        var calls: [UInt32: Waiter] = [:]
        /// Unary calls armed whose request is not yet written to the socket.
        var unwritten: Set<UInt32> = []
        var nextID: UInt32 = 1
        var goaway = false
        var closed = false
        /// Set by a draining client: runs once no call is open.
        var onIdle: (@Sendable () -> Void)?

        /// Adds a call under a fresh id; nil when the connection takes no new calls.
        mutating func insert(_ waiter: Waiter) -> UInt32? {
            guard !goaway, !closed else { return nil }
            var id = nextID
            while id == 0 || calls[id] != nil { id &+= 1 }
            nextID = id &+ 1
            calls[id] = waiter
            return id
        }

        /// The idle action, taken, when it is due.
        mutating func idleActionIfDue() -> (@Sendable () -> Void)? {
            guard calls.isEmpty, let action = onIdle else { return nil }
            onIdle = nil
            return action
        }
    }

    private let state = Mutex(State())

    var acceptsCalls: Bool { state.withLock { !$0.goaway && !$0.closed } }

    /// Registers a streaming call and returns its id; nil when the connection takes no new calls.
    func open(_ continuation: AsyncThrowingStream<LeanFrame, any Error>.Continuation) -> UInt32? {
        state.withLock { $0.insert(.stream(continuation)) }
    }

    /// Reserves an id for a unary call, to be armed with ``arm(_:_:)``; nil when the connection
    /// takes no new calls.
    func reserveUnary() -> UInt32? {
        state.withLock { $0.insert(.unary(nil, message: nil, failure: nil)) }
    }

    /// Gives a reserved unary call its continuation. Returns false, having resumed it with the
    /// error, when the call already failed (cancelled, or the connection lost). Each continuation
    /// is resumed exactly once: by whoever takes its call out of the table, under the lock.
    func arm(_ id: UInt32, _ continuation: UnsafeContinuation<UnaryAnswer, any Error>) -> Bool {
        let (failure, idle) = state.withLock { state -> ((any Error)?, (@Sendable () -> Void)?) in
            guard case .unary(_, let message, let failure)? = state.calls[id] else {
                // The connection was lost between reserving and arming: nothing was written.
                return (LeanClient.NotSent(error: ServiceError(.unavailable, "connection closed")), nil)
            }
            if let failure {
                state.calls.removeValue(forKey: id)
                return (failure, state.idleActionIfDue())
            }
            state.calls[id] = .unary(continuation, message: message, failure: nil)
            state.unwritten.insert(id)
            return (nil, nil)
        }
        guard let failure else { return true }
        continuation.resume(throwing: failure)
        idle?()
        return false
    }

    /// The write of unary call `id`'s request completed: from now on a lost connection may have
    /// delivered it. A failed write delivered nothing, so the call ends as not sent.
    func written(_ id: UInt32, _ result: Result<Void, any Error>) {
        state.withLock { _ = $0.unwritten.remove(id) }
        if case .failure(let error) = result {
            fail(id, LeanClient.NotSent(error: ServiceError(.unavailable, "request not sent: \(error)")))
        }
    }

    /// Ends a unary call with `error` (its deadline, or its task cancelled), unless it has ended.
    func fail(_ id: UInt32, _ error: any Error) {
        let (armed, idle) = state.withLock {
            state -> (UnsafeContinuation<UnaryAnswer, any Error>?, (@Sendable () -> Void)?) in
            guard case .unary(let continuation, let message, _)? = state.calls[id] else { return (nil, nil) }
            guard let continuation else {
                state.calls[id] = .unary(nil, message: message, failure: error)
                return (nil, nil)
            }
            state.calls.removeValue(forKey: id)
            state.unwritten.remove(id)
            return (continuation, state.idleActionIfDue())
        }
        armed?.resume(throwing: error)
        idle?()
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
            let stream = state.withLock { state -> AsyncThrowingStream<LeanFrame, any Error>.Continuation? in
                switch state.calls[frame.callID] {
                case .stream(let continuation)?:
                    return continuation
                case .unary(let continuation, _, let failure)?:
                    state.calls[frame.callID] = .unary(continuation, message: frame.payload, failure: failure)
                    return nil
                case nil:
                    return nil
                }
            }
            stream?.yield(frame)
        case .end:
            let (call, idle) = state.withLock { state in
                (state.calls.removeValue(forKey: frame.callID), state.idleActionIfDue())
            }
            switch call {
            case .stream(let continuation)?:
                continuation.yield(frame)
                continuation.finish()
            case .unary(let continuation?, let message, _)?:
                continuation.resume(returning: UnaryAnswer(message: message, end: frame))
            case .unary(nil, _, _)?, nil:
                break
            }
            idle?()
        case .goaway:
            state.withLock { $0.goaway = true }
        default:
            break
        }
    }

    /// Fails every open call (the connection is gone); a unary call whose request was never
    /// written fails as ``LeanClient/NotSent``.
    func failAll(_ error: ServiceError) {
        let (calls, unwritten) = state.withLock { state in
            state.closed = true
            defer {
                state.calls.removeAll()
                state.unwritten.removeAll()
            }
            return (state.calls, state.unwritten)
        }
        for (id, call) in calls {
            switch call {
            case .stream(let continuation): continuation.finish(throwing: error)
            case .unary(let continuation?, _, _):
                continuation.resume(throwing: unwritten.contains(id) ? LeanClient.NotSent(error: error) : error)
            case .unary(nil, _, _): break  // arm finds it gone and fails it
            }
        }
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
