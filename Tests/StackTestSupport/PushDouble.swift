package import Foundation
package import HeraldModel
package import HeraldRPC
package import HeraldService
package import NIOCore
package import NIOHTTP1
package import NIOHTTP2
package import NIOPosix
package import NIOSSL
package import Synchronization
package import Testing

/// A push service on loopback: HTTP/2 over TLS (certificate from the tests' own CA), recording
/// every request and answering what `respond` decides. The APNs, FCM, WNS, OAuth and Web Push
/// doubles are this server with their providers' rules in `respond` (``ProviderFixture``; APNs'
/// rules are ProviderDoubles', which herald-bench's APNs double answers by too); Herald's senders
/// reach it through their overridable base URLs and `push-ca-file`.
package final class PushDouble: Sendable {
    package struct Request: Sendable {
        package var method: String
        package var path: String
        /// Lower-case names.
        package var headers: [(String, String)]
        package var body: [UInt8]
        package var at: ContinuousClock.Instant
        package var wallClock: Date

        package func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
    }

    package struct Reply: Sendable {
        package var status: Int
        package var headers: [(String, String)] = []
        package var body: [UInt8] = []
        /// After answering, send GOAWAY and close the connection (APNs does this on maintenance).
        package var goAway = false
        /// Answer this much later (the stream stays open meanwhile, like a slow service).
        package var delay: TimeAmount = .zero

        package init(
            status: Int, headers: [(String, String)] = [], body: [UInt8] = [], goAway: Bool = false,
            delay: TimeAmount = .zero
        ) {
            self.status = status
            self.headers = headers
            self.body = body
            self.goAway = goAway
            self.delay = delay
        }

        package static func json(_ status: Int, _ object: [String: Any], headers: [(String, String)] = []) -> Reply {
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
            return Reply(status: status, headers: [("content-type", "application/json")] + headers, body: Array(data))
        }
    }

    package let port: Int
    private let channel: any Channel
    private let recorded = Mutex<[Request]>([])
    /// TLS connections accepted so far (HTTP/2 multiplexes every stream of a client over one).
    package var connections: Int { holder.connections.withLock { $0 } }
    private let holder: DoubleHolder

    private init(port: Int, channel: any Channel, holder: DoubleHolder) {
        self.port = port
        self.channel = channel
        self.holder = holder
    }

    package var url: String { "https://127.0.0.1:\(port)" }

    package var requests: [Request] { recorded.withLock { $0 } }

    fileprivate func record(_ request: Request) { recorded.withLock { $0.append(request) } }

    /// Starts a double with the certificate and key of `tls` (PEM files) on a free loopback port;
    /// with `http1`, one that offers only HTTP/1.1 in ALPN (a proxy in front of FCM, say); with
    /// `clientCA`, one that, as APNs with certificate-based auth, completes only handshakes that
    /// present a client certificate from that CA (PEM file).
    package static func start(
        certificate: String, key: String, http1: Bool = false, clientCA: String? = nil,
        respond: @escaping @Sendable (Request) -> Reply
    ) async throws -> PushDouble {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
        configuration.applicationProtocols = http1 ? ["http/1.1"] : ["h2"]
        if let clientCA {
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .file(clientCA)
        }
        let context = try NIOSSLContext(configuration: configuration)
        let holder = DoubleHolder()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                holder.connections.withLock { $0 += 1 }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                }.flatMap {
                    if http1 {
                        return channel.pipeline.configureHTTPServerPipeline().flatMap {
                            channel.pipeline.addHandler(StreamHandler(holder: holder, http1: true, respond: respond))
                        }
                    }
                    return channel.configureHTTP2Pipeline(mode: .server) { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandlers([
                                HTTP2FramePayloadToHTTP1ServerCodec(), StreamHandler(holder: holder, respond: respond),
                            ])
                        }
                    }.map { _ in }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let double = PushDouble(port: channel.localAddress!.port!, channel: channel, holder: holder)
        holder.double.withLock { $0 = double }
        return double
    }

    package func stop() async {
        try? await channel.close()
    }

    /// Polls until `count` requests match `filter`, or the deadline passes; returns the matches.
    package func waitFor(
        _ count: Int, timeout: Duration = .seconds(20), where filter: (Request) -> Bool = { _ in true }
    )
        async throws -> [Request]
    {
        let deadline = ContinuousClock.now + timeout
        while true {
            let found = requests.filter(filter)
            if found.count >= count || ContinuousClock.now >= deadline { return found }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}

/// Lets the stream handlers reach the double created after the server bound.
package final class DoubleHolder: Sendable {
    package let double = Mutex<PushDouble?>(nil)
    package let connections = Mutex(0)
}

/// One HTTP/2 stream, seen as HTTP/1-style parts: collects the request, records it, answers.
private final class StreamHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let holder: DoubleHolder
    private let http1: Bool
    private let respond: @Sendable (PushDouble.Request) -> PushDouble.Reply
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []

    init(
        holder: DoubleHolder, http1: Bool = false, respond: @escaping @Sendable (PushDouble.Request) -> PushDouble.Reply
    ) {
        self.holder = holder
        self.http1 = http1
        self.respond = respond
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            // Over HTTP/1.1 one handler sees every request of a kept-alive connection.
            self.head = head
            body = []
        case .body(let buffer): body += Array(buffer: buffer)
        case .end:
            guard let head else { return }
            let request = PushDouble.Request(
                method: head.method.rawValue, path: head.uri,
                headers: head.headers.map { ($0.name.lowercased(), $0.value) },
                body: body, at: .now, wallClock: Date())
            holder.double.withLock { $0 }?.record(request)
            let reply = respond(request)
            if reply.delay > .zero {
                let loop = context.eventLoop
                let bound = NIOLoopBound(context, eventLoop: loop)
                loop.scheduleTask(in: reply.delay) { self.answer(context: bound.value, reply) }
            } else {
                answer(context: context, reply)
            }
        }
    }

    private func answer(context: ChannelHandlerContext, _ reply: PushDouble.Reply) {
        var headers = HTTPHeaders(reply.headers)
        headers.add(name: "content-length", value: String(reply.body.count))
        context.write(
            wrapOutboundOut(
                .head(
                    HTTPResponseHead(
                        version: http1 ? .http1_1 : .http2, status: .init(statusCode: reply.status),
                        headers: headers))),
            promise: nil)
        if !reply.body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: reply.body)))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        if reply.goAway, let parent = context.channel.parent {
            let streamID =
                (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)) ?? .rootStream
            let frame = HTTP2Frame(
                streamID: .rootStream, payload: .goAway(lastStreamID: streamID, errorCode: .noError, opaqueData: nil))
            parent.writeAndFlush(frame).whenComplete { _ in
                parent.eventLoop.scheduleTask(in: .milliseconds(50)) { parent.close(promise: nil) }
            }
        }
    }
}
