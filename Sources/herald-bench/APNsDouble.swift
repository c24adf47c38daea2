import ArgumentParser
import Crypto
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import ProviderDoubles
import Synchronization

/// `herald-bench apns-double`: APNs on loopback (and FCM HTTP v1 with `--fcm-project`), in a
/// process of its own so that its CPU is not Herald's, for `fanout --provider apns|fcm`.
///
/// HTTP/2 over TLS (ALPN h2), SETTINGS_MAX_CONCURRENT_STREAMS 1000 as APNs advertises. It holds
/// every request to the APNs rules the tests' double answers by (ProviderDoubles' `APNsRules`)
/// that cost nothing per request: the provider token's ES256 signature, `kid`, `iss` and age are
/// checked once per connection (and again whenever a connection's token changes, as APNs caches a
/// verified token), then the device token's form (64 hex digits), `apns-topic`,
/// `apns-push-type`, `apns-priority`, `apns-id` and the payload's size on every request (not the
/// payload's JSON); it answers 200 with the `apns-id`, or APNs' status and reason. For FCM it hands out an access token at `/token`
/// (counted as a token check) and accepts sends to the project that carry it. Frames are handled on the connection (no stream
/// channels), and answers are flushed once per read, so one event-loop thread serves well over
/// 100k requests/s (`herald-bench fanout --provider apns` measures it with h2load).
struct APNsDoubleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-double", abstract: "Serve an APNs double on loopback (HTTP/2, TLS).", shouldDisplay: false)

    @Option var certificate: String
    @Option var key: String
    @Option(help: "The provider key's public half (PEM).") var jwtPublicKey: String
    @Option var keyID: String
    @Option var teamID: String
    @Option var topic: String
    @Option(help: "Written once listening: the double's URL.") var urlFile: String
    @Option(help: "Rewritten every 50 ms: requests answered 200, refused, token checks, connections.") var statsFile:
        String
    @Option var threads = 1
    @Option(help: "Also serve FCM HTTP v1 for this project (and its OAuth token endpoint, /token).") var fcmProject:
        String?
    @Option(help: "A device token whose pushes' arrival times (apns-id and Unix ms) go to --watch-file.")
    var watchDevice: String?
    @Option var watchFile: String?

    func run() async throws { try await execute() }

    func execute() async throws {
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        let rules = APNsDoubleRules(
            provider: APNsRules.Provider(
                key: try P256.Signing.PublicKey(
                    pemRepresentation: String(contentsOfFile: jwtPublicKey, encoding: .utf8)),
                keyID: keyID, teamID: teamID, topic: topic),
            fcmPath: fcmProject.map { "/v1/projects/\($0)/messages:send" })
        let counters = APNsDoubleCounters(watch: watchDevice)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                counters.connections.add(1, ordering: .relaxed)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers([
                        NIOSSLServerHandler(context: context),
                        NIOHTTP2Handler(
                            mode: .server,
                            initialSettings: [
                                HTTP2Setting(parameter: .maxConcurrentStreams, value: 1000),
                                HTTP2Setting(parameter: .initialWindowSize, value: 1 << 20),
                                HTTP2Setting(parameter: .maxHeaderListSize, value: 8000),
                            ]),
                        APNsDoubleHandler(rules: rules, counters: counters),
                    ])
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        guard let port = channel.localAddress?.port else { throw BenchError("the APNs double has no port") }
        try "https://127.0.0.1:\(port)".write(toFile: urlFile, atomically: true, encoding: .utf8)
        while true {
            let line =
                "\(counters.delivered.load(ordering: .relaxed)) \(counters.refused.load(ordering: .relaxed)) "
                + "\(counters.verifications.load(ordering: .relaxed)) \(counters.connections.load(ordering: .relaxed))\n"
            try? line.write(toFile: statsFile, atomically: true, encoding: .utf8)
            if let watchFile {
                let lines = counters.watched.withLock { $0 }
                try? lines.map { $0 + "\n" }.joined().write(toFile: watchFile, atomically: true, encoding: .utf8)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// What the double's stats file says.
struct APNsDoubleStats {
    var delivered = 0
    var refused = 0
    var verifications = 0
    var connections = 0

    static func read(_ path: String) -> APNsDoubleStats? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let fields = text.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        guard fields.count == 4 else { return nil }
        return APNsDoubleStats(
            delivered: fields[0], refused: fields[1], verifications: fields[2], connections: fields[3])
    }
}

final class APNsDoubleCounters: Sendable {
    let delivered = Atomic(0)
    let refused = Atomic(0)
    let verifications = Atomic(0)
    let connections = Atomic(0)
    /// The watched device's pushes: "apns-id unix-ms" per line, as they arrived.
    let watched = Mutex<[String]>([])
    let watch: String?

    init(watch: String? = nil) { self.watch = watch }
}

/// What the double holds requests to: APNs' rules (ProviderDoubles' ``APNsRules``, which the tests'
/// double answers by too) for one provider, and FCM's access token when FCM is served.
struct APNsDoubleRules: Sendable {
    var provider: APNsRules.Provider
    /// FCM's send path, when FCM is served too.
    var fcmPath: String?
    /// The access token the double's `/token` hands out, and FCM sends must carry.
    static let fcmAccessToken = "bench-fcm-access-token"

    /// nil when the token is good; otherwise APNs' refusal. Its claims are checked with its
    /// signature, once per token a connection sends.
    func check(jwt: String) -> APNsRules.Refusal? {
        switch APNsRules.verify(providerToken: jwt, key: provider.key) {
        case .failure(let refusal): return refusal
        case .success(let token):
            return APNsRules.check(token, for: provider, now: Date().timeIntervalSince1970)
        }
    }
}

/// One connection of the double: requests seen as frames, answered when their stream ends.
final class APNsDoubleHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let rules: APNsDoubleRules
    private let counters: APNsDoubleCounters
    /// The last token this connection verified.
    private var verified: String?
    /// Streams whose headers arrived, awaiting their body's end: the answer already decided.
    private var open: [HTTP2StreamID: Reply] = [:]
    private var sent = 0

    /// An answer: status, headers besides `:status`, a JSON body; `push`: a push (counted), not a token request.
    struct Reply {
        var status: Int
        var headers: [(String, String)] = []
        var body: String?
        var push = true

        static func apns(_ apnsID: String, refused refusal: APNsRules.Refusal? = nil) -> Reply {
            Reply(
                status: refusal?.status ?? 200, headers: [("apns-id", apnsID)],
                body: refusal.map { #"{"reason":"\#($0.reason)"}"# })
        }

        static func fcm(_ status: Int, _ error: String) -> Reply {
            Reply(status: status, body: #"{"error":{"code":\#(status),"status":"\#(error)"}}"#)
        }
    }
    private var unacknowledged = 0

    init(rules: APNsDoubleRules, counters: APNsDoubleCounters) {
        self.rules = rules
        self.counters = counters
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let block):
            let answer = decide(block.headers)
            if block.endStream {
                reply(context, frame.streamID, answer)
            } else {
                open[frame.streamID] = answer
            }
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
            if body.endStream, var answer = open.removeValue(forKey: frame.streamID) {
                if answer.push, let refusal = APNsRules.checkPayloadSize(body.data.readableBytes) {
                    answer = Reply(status: refusal.status, body: #"{"reason":"\#(refusal.reason)"}"#)
                }
                reply(context, frame.streamID, answer)
            }
        case .rstStream:
            open[frame.streamID] = nil
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
        context.fireChannelReadComplete()
    }

    private func decide(_ headers: HPACKHeaders) -> Reply {
        var path = ""
        var authorization = ""
        var topic = ""
        var type = ""
        var apnsID = ""
        var priority = ""
        for (name, value, _) in headers {
            switch name {
            case ":path": path = value
            case "authorization": authorization = value
            case "apns-topic": topic = value
            case "apns-push-type": type = value
            case "apns-id": apnsID = value
            case "apns-priority": priority = value
            default: break
            }
        }
        if let fcmPath = rules.fcmPath {
            if path == "/token" {
                counters.verifications.add(1, ordering: .relaxed)
                return Reply(
                    status: 200,
                    body:
                        #"{"access_token":"\#(APNsDoubleRules.fcmAccessToken)","token_type":"Bearer","expires_in":3600}"#,
                    push: false)
            }
            if path == fcmPath {
                guard authorization == "Bearer \(APNsDoubleRules.fcmAccessToken)" else {
                    return .fcm(401, "UNAUTHENTICATED")
                }
                sent += 1
                return Reply(status: 200, body: #"{"name":"\#(path.dropLast(5))/\#(sent)"}"#)
            }
        }
        // APNs' rules in their order; the token's signature once per token a connection sends.
        let token: Substring
        switch (APNsRules.deviceToken(path: path), APNsRules.providerToken(authorization: authorization)) {
        case (.failure(let refusal), _), (_, .failure(let refusal)): return .apns(apnsID, refused: refusal)
        case (.success, .success(let jwt)): token = jwt
        }
        if authorization != verified {
            counters.verifications.add(1, ordering: .relaxed)
            if let refusal = rules.check(jwt: String(token)) { return .apns(apnsID, refused: refusal) }
            verified = authorization
        }
        if let refusal = APNsRules.checkHeaders(
            topic: topic, pushType: type, priority: priority, apnsID: apnsID, for: rules.provider)
        {
            return .apns(apnsID, refused: refusal)
        }
        if let watch = counters.watch, path.hasSuffix(watch) {
            let at = Int64(Date().timeIntervalSince1970 * 1000)
            counters.watched.withLock { $0.append("\(apnsID.lowercased()) \(at)") }
        }
        return .apns(apnsID)
    }

    private func reply(_ context: ChannelHandlerContext, _ stream: HTTP2StreamID, _ answer: Reply) {
        if answer.push {
            if answer.status == 200 {
                counters.delivered.add(1, ordering: .relaxed)
            } else {
                counters.refused.add(1, ordering: .relaxed)
            }
        }
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(answer.status))
        for (name, value) in answer.headers { headers.add(name: name, value: value, indexing: .nonIndexable) }
        guard let body = answer.body else {
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(streamID: stream, payload: .headers(.init(headers: headers, endStream: true)))),
                promise: nil)
            return
        }
        headers.add(name: "content-type", value: "application/json")
        context.write(
            wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .headers(.init(headers: headers)))), promise: nil)
        context.write(
            wrapOutboundOut(
                HTTP2Frame(
                    streamID: stream,
                    payload: .data(.init(data: .byteBuffer(ByteBuffer(string: body)), endStream: true)))),
            promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream's error ends that stream only; anything else ends the connection.
        if error is NIOHTTP2Errors.StreamError { return }
        context.close(promise: nil)
    }
}
