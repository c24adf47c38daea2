public import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOHTTP2
public import NIOPosix
import NIOSSL
import Synchronization

/// A push service on loopback, written once for the tests and herald-bench: HTTP/2 over TLS (ALPN
/// h2), or over plain TCP with prior knowledge, or HTTP/1.1 alone (a proxy in front of FCM, say).
/// What it answers is the caller's: the tests' ``respond`` plays APNs, FCM, WNS, OAuth and Web Push
/// by path (StackTestSupport's `ProviderFixture`), herald-bench's APNs and FCM at full speed; each
/// holds Herald's senders to the providers' rules (``APNsRules``).
///
/// HTTP/2 is handled as frames on the connection, with no channel per stream, and answers written
/// while reading are flushed once per read: one event-loop thread answers a request in about 14 µs
/// of CPU, some 70k requests/s (release build, `herald-bench fanout --provider apns`, which
/// measures it with h2load; Herald's sender pushes 25–30k/s to it). It advertises APNs' 1,000
/// concurrent streams and a 1 MiB stream window, and acknowledges the connection window as it
/// reads.
public final class PushDouble: Sendable {
    public struct Request: Sendable {
        public var method: String
        public var path: String
        /// Lower-case names; HTTP/2's `:authority` as `host`, the other pseudo-headers left out.
        public var headers: [(String, String)]
        public var body: [UInt8]
        public var at: ContinuousClock.Instant
        public var wallClock: Date
        /// Which of the double's connections it came on (1, 2, …), for state a real service keeps per
        /// connection (APNs verifies a provider token once per connection).
        public var connection: Int

        public func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
    }

    public struct Reply: Sendable {
        public var status: Int
        public var headers: [(String, String)] = []
        public var body: [UInt8] = []
        /// After answering, send GOAWAY and close the connection (APNs does this on maintenance).
        public var goAway = false
        /// Answer this much later (the stream stays open meanwhile, like a slow service).
        public var delay: TimeAmount = .zero

        public init(
            status: Int, headers: [(String, String)] = [], body: [UInt8] = [], goAway: Bool = false,
            delay: TimeAmount = .zero
        ) {
            self.status = status
            self.headers = headers
            self.body = body
            self.goAway = goAway
            self.delay = delay
        }

        public static func json(_ status: Int, _ object: [String: Any], headers: [(String, String)] = []) -> Reply {
            // An object JSON cannot hold is the caller's mistake: a 500 the test sees, not a trap.
            guard JSONSerialization.isValidJSONObject(object),
                // trap-ok: a dictionary (never the top-level fragment the writer traps on), checked above
                let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
            else { return Reply(status: 500, body: Array("the double's answer is not JSON".utf8)) }
            return Reply(status: status, headers: [("content-type", "application/json")] + headers, body: Array(data))
        }

        /// A JSON body already written as text.
        public static func json(_ status: Int, text: String, headers: [(String, String)] = []) -> Reply {
            Reply(status: status, headers: headers + [("content-type", "application/json")], body: Array(text.utf8))
        }
    }

    /// Sends a request's answer, at once or later, from any thread; a request whose responder is
    /// never called is never answered (its stream stays open).
    public struct Responder: Sendable {
        fileprivate let sendReply: @Sendable (Reply) -> Void
        public func send(_ reply: Reply) { sendReply(reply) }
    }

    /// How the double listens.
    public enum Transport: Sendable {
        /// HTTP/2 over TLS with this certificate and key (PEM files); with `clientCA`, as APNs with
        /// certificate-based auth, only handshakes that present a client certificate from that CA.
        case tls(certificate: String, key: String, clientCA: String? = nil)
        /// HTTP/1.1 alone over TLS (ALPN offers only http/1.1).
        case http1(certificate: String, key: String)
        /// HTTP/2 over plain TCP, prior knowledge.
        case plaintext
    }

    public let port: Int
    private let channel: any Channel
    private let state: State

    final class State: Sendable {
        let record: Bool
        let recorded = Mutex<[Request]>([])
        let connections = Atomic(0)
        let resets = Atomic(0)
        let respond: @Sendable (Request, Responder) -> Void

        init(record: Bool, respond: @escaping @Sendable (Request, Responder) -> Void) {
            self.record = record
            self.respond = respond
        }

        func received(_ request: Request, _ responder: Responder) {
            if record { recorded.withLock { $0.append(request) } }
            respond(request, responder)
        }
    }

    private init(port: Int, channel: any Channel, state: State) {
        self.port = port
        self.channel = channel
        self.state = state
    }

    public var url: String { "https://127.0.0.1:\(port)" }
    /// Every request so far, in arrival order (none unless started with `record`).
    public var requests: [Request] { state.recorded.withLock { $0 } }
    /// Connections accepted so far (HTTP/2 multiplexes every stream of a client over one).
    public var connections: Int { state.connections.load(ordering: .relaxed) }
    /// RST_STREAM frames received: streams the client gave up on.
    public var resets: Int { state.resets.load(ordering: .relaxed) }

    /// A double that answers each request at once with what `respond` returns.
    public static func start(
        _ transport: Transport, record: Bool = true, eventLoopGroup: MultiThreadedEventLoopGroup = .singleton,
        respond: @escaping @Sendable (Request) -> Reply
    ) async throws -> PushDouble {
        try await start(transport, record: record, eventLoopGroup: eventLoopGroup) { request, responder in
            responder.send(respond(request))
        }
    }

    /// A double that hands each request to `respond` with the means to answer it when it chooses.
    public static func start(
        _ transport: Transport, record: Bool = true, eventLoopGroup: MultiThreadedEventLoopGroup = .singleton,
        respond: @escaping @Sendable (Request, Responder) -> Void
    ) async throws -> PushDouble {
        let state = State(record: record, respond: respond)
        let tls: NIOSSLContext?
        switch transport {
        case .tls(let certificate, let key, let clientCA):
            tls = try context(certificate: certificate, key: key, protocols: ["h2"], clientCA: clientCA)
        case .http1(let certificate, let key):
            tls = try context(certificate: certificate, key: key, protocols: ["http/1.1"], clientCA: nil)
        case .plaintext:
            tls = nil
        }
        let http1 = if case .http1 = transport { true } else { false }
        let channel = try await ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            // As Herald's HTTP/2 client reads: at most 16 KiB a turn of the loop, so that a batch of
            // hundreds of requests is decoded over several turns, not in one that holds the loop.
            .childChannelOption(.maxMessagesPerRead, value: 1)
            .childChannelOption(
                .recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 1024, initial: 4096, maximum: 16384)
            )
            .childChannelInitializer { channel in
                let connection = state.connections.add(1, ordering: .relaxed).newValue
                return channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    if let tls { try pipeline.addHandler(NIOSSLServerHandler(context: tls)) }
                    if http1 {
                        try pipeline.configureHTTPServerPipeline()
                        try pipeline.addHandler(HTTP1Handler(state: state, connection: connection))
                        return
                    }
                    try pipeline.addHandlers([
                        NIOHTTP2Handler(
                            mode: .server,
                            initialSettings: [
                                HTTP2Setting(parameter: .maxConcurrentStreams, value: 1000),
                                HTTP2Setting(parameter: .initialWindowSize, value: 1 << 20),
                                HTTP2Setting(parameter: .maxHeaderListSize, value: 8000),
                            ]),
                        HTTP2Handler(state: state, connection: connection),
                    ])
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        guard let port = channel.localAddress?.port else {
            try? await channel.close()
            throw PushDoubleError("the double's socket has no port")
        }
        return PushDouble(port: port, channel: channel, state: state)
    }

    private static func context(certificate: String, key: String, protocols: [String], clientCA: String?) throws
        -> NIOSSLContext
    {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
        configuration.applicationProtocols = protocols
        if let clientCA {
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .file(clientCA)
        }
        return try NIOSSLContext(configuration: configuration)
    }

    public func stop() async {
        try? await channel.close()
    }

    /// Polls until `count` requests match `filter`, or the deadline passes; returns the matches.
    public func waitFor(
        _ count: Int, timeout: Duration = .seconds(20), where filter: (Request) -> Bool = { _ in true }
    ) async throws -> [Request] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let found = requests.filter(filter)
            if found.count >= count || ContinuousClock.now >= deadline { return found }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}

public struct PushDoubleError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// One HTTP/2 connection: each stream's headers and body gathered from its frames, handed on when
/// the stream ends, answered as frames on the same connection.
private final class HTTP2Handler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let state: PushDouble.State
    private let connection: Int
    private var streams: [HTTP2StreamID: (headers: HPACKHeaders, body: ByteBuffer?)] = [:]
    private var unacknowledged = 0
    /// Within a read: answers written now are flushed once, at its end.
    private var reading = false

    init(state: PushDouble.State, connection: Int) {
        self.state = state
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reading = true
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let block):
            // A second HEADERS on a stream is its trailers, which no push service reads.
            if streams[frame.streamID] == nil { streams[frame.streamID] = (block.headers, nil) }
            if block.endStream { finish(context, frame.streamID) }
        case .data(let body):
            unacknowledged += body.data.readableBytes + (body.paddingBytes ?? 0)
            // Below 65,535: the connection window every peer starts with.
            if unacknowledged >= 1 << 14 {
                context.write(
                    wrapOutboundOut(
                        HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unacknowledged))),
                    promise: nil)
                unacknowledged = 0
            }
            if case .byteBuffer(var bytes) = body.data, bytes.readableBytes > 0 {
                if streams[frame.streamID]?.body == nil {
                    streams[frame.streamID]?.body = bytes
                } else {
                    streams[frame.streamID]?.body?.writeBuffer(&bytes)
                }
            }
            if body.endStream { finish(context, frame.streamID) }
        case .rstStream:
            streams[frame.streamID] = nil
            state.resets.add(1, ordering: .relaxed)
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        context.flush()
        context.fireChannelReadComplete()
    }

    private func finish(_ context: ChannelHandlerContext, _ stream: HTTP2StreamID) {
        guard let (headers, body) = streams.removeValue(forKey: stream) else { return }
        var request = PushDouble.Request(
            method: "", path: "", headers: [], body: body.map { Array(buffer: $0) } ?? [], at: .now,
            wallClock: Date(), connection: connection)
        request.headers.reserveCapacity(headers.count)
        for (name, value, _) in headers {
            switch name {
            case ":method": request.method = value
            case ":path": request.path = value
            case ":authority": request.headers.append(("host", value))
            case _ where name.hasPrefix(":"): break
            default: request.headers.append((name, value))
            }
        }
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        state.received(
            request,
            PushDouble.Responder { reply in
                if reply.delay > .zero {
                    loop.scheduleTask(in: reply.delay) {
                        bound.value.0.answer(bound.value.1, stream, reply, flush: true)
                    }
                } else if loop.inEventLoop {
                    bound.value.0.answer(bound.value.1, stream, reply, flush: !bound.value.0.reading)
                } else {
                    loop.execute { bound.value.0.answer(bound.value.1, stream, reply, flush: true) }
                }
            })
    }

    private func answer(
        _ context: ChannelHandlerContext, _ stream: HTTP2StreamID, _ reply: PushDouble.Reply, flush: Bool
    ) {
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(reply.status))
        for (name, value) in reply.headers {
            headers.add(name: name.lowercased(), value: value, indexing: .nonIndexable)
        }
        headers.add(name: "content-length", value: String(reply.body.count))
        context.write(
            wrapOutboundOut(
                HTTP2Frame(streamID: stream, payload: .headers(.init(headers: headers, endStream: reply.body.isEmpty)))),
            promise: nil)
        if !reply.body.isEmpty {
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: stream,
                        payload: .data(.init(data: .byteBuffer(ByteBuffer(bytes: reply.body)), endStream: true)))),
                promise: nil)
        }
        if reply.goAway {
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: .rootStream,
                        payload: .goAway(lastStreamID: stream, errorCode: .noError, opaqueData: nil))),
                promise: nil)
            let channel = context.channel
            channel.eventLoop.scheduleTask(in: .milliseconds(50)) { channel.close(promise: nil) }
        }
        if flush || reply.goAway { context.flush() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream's error ends that stream only; anything else ends the connection.
        if error is NIOHTTP2Errors.StreamError { return }
        context.close(promise: nil)
    }
}

/// HTTP/1.1: one handler sees every request of a kept-alive connection, answered in order.
private final class HTTP1Handler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let state: PushDouble.State
    private let connection: Int
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []

    init(state: PushDouble.State, connection: Int) {
        self.state = state
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = []
        case .body(let buffer): body += Array(buffer: buffer)
        case .end:
            guard let head else { return }
            let request = PushDouble.Request(
                method: head.method.rawValue, path: head.uri,
                headers: head.headers.map { ($0.name.lowercased(), $0.value) },
                body: body, at: .now, wallClock: Date(), connection: connection)
            let loop = context.eventLoop
            let bound = NIOLoopBound((self, context), eventLoop: loop)
            state.received(
                request,
                PushDouble.Responder { reply in
                    loop.scheduleTask(in: reply.delay) { bound.value.0.answer(bound.value.1, reply) }
                })
        }
    }

    private func answer(_ context: ChannelHandlerContext, _ reply: PushDouble.Reply) {
        var headers = HTTPHeaders(reply.headers)
        headers.add(name: "content-length", value: String(reply.body.count))
        context.write(
            wrapOutboundOut(
                .head(HTTPResponseHead(version: .http1_1, status: .init(statusCode: reply.status), headers: headers))),
            promise: nil)
        if !reply.body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: reply.body)))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        if reply.goAway { context.close(promise: nil) }
    }
}
