import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import Synchronization
import Testing

@testable import DispatchService

#if canImport(Glibc)
    import Glibc
#endif

@Suite("HTTP/2 pool")
struct HTTP2PoolTests {
    /// A loopback port nothing listens on: bound, then closed.
    static func closedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        try #require(bound)
        return Int(UInt16(bigEndian: address.sin_port))
    }

    @Test("a push service that refuses connections: every request fails as ConnectionError, and nothing traps")
    func refusedConnection() async throws {
        // Each refused connection is torn down without ever being active; its readiness promise
        // once stayed pending, which NIO traps on in debug builds (dispatch died by SIGILL).
        let pool = try HTTP2Pool(url: "http://127.0.0.1:\(try Self.closedPort())", tls: nil, connections: 2, connectTimeout: .seconds(2))
        var headers = HPACKHeaders()
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":path", value: "/3/device/x")
        for _ in 0..<10 {
            let answers = await pool.send([HTTP2Request(headers: headers, body: ByteBuffer())], timeout: .seconds(2))
            #expect(answers.count == 1)
            guard case .failed = answers.first else {
                Issue.record("a refused connection answered \(String(describing: answers.first))")
                continue
            }
        }
    }

    static func requests(_ prefix: String, _ count: Int) -> [HTTP2Request] {
        (0..<count).map { n in
            var headers = HPACKHeaders()
            headers.add(name: ":method", value: "POST")
            headers.add(name: ":scheme", value: "http")
            headers.add(name: ":authority", value: "127.0.0.1")
            headers.add(name: ":path", value: "/\(prefix)/\(n)")
            return HTTP2Request(headers: headers, body: ByteBuffer(string: "{}"))
        }
    }

    @Test(
        "a batch that times out resets no stream: its connection is retired, the other batch on it is answered, the next goes on a new one")
    func timeoutRetires() async throws {
        // 300 unanswered streams reset at once once made NIOHTTP2's server (200 resets per 30 s)
        // close the connection, and the fast batch beside them failed with it.
        let server = try await SilentHTTP2Server.start(delay: .milliseconds(800))
        defer { Task { await server.stop() } }
        let pool = try HTTP2Pool(url: "http://127.0.0.1:\(server.port)", tls: nil, connections: 1)
        async let slow = pool.send(Self.requests("slow", 300), timeout: .milliseconds(200))
        async let fast = pool.send(Self.requests("fast", 20), timeout: .seconds(30))
        let (slowAnswers, fastAnswers) = await (slow, fast)
        #expect(slowAnswers.allSatisfy { if case .failed(reason: "Timeout") = $0 { true } else { false } })
        let statuses = fastAnswers.map { answer -> String in
            if case .answered(let status, _, _) = answer { "\(status)" } else { "\(answer)" }
        }
        #expect(statuses == Array(repeating: "200", count: 20))
        #expect(server.counters.resets.load(ordering: .relaxed) == 0)
        #expect(server.counters.connections.load(ordering: .relaxed) == 1)
        let next = await pool.send(Self.requests("fast", 1), timeout: .seconds(30))
        guard case .answered(200, _, _) = next.first else {
            Issue.record("after the retired connection: \(next)")
            return
        }
        #expect(server.counters.connections.load(ordering: .relaxed) == 2)
    }
}

/// A loopback HTTP/2 server (prior knowledge, no TLS) with NIOHTTP2's default protections (200
/// RST_STREAM frames per 30 s, then GOAWAY) and APNs' 1,000 streams at once: it
/// answers `/fast/…` 200 after `delay` and never answers `/slow/…`; it counts connections and the
/// RST_STREAM frames it receives.
final class SilentHTTP2Server: Sendable {
    final class Counters: Sendable {
        let connections = Atomic<Int>(0)
        let resets = Atomic<Int>(0)
    }

    let port: Int
    let counters: Counters
    private let channel: any Channel

    private init(port: Int, channel: any Channel, counters: Counters) {
        self.port = port
        self.channel = channel
        self.counters = counters
    }

    static func start(delay: TimeAmount) async throws -> SilentHTTP2Server {
        let counters = Counters()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                counters.connections.add(1, ordering: .relaxed)
                // APNs' limit of streams at once; NIOHTTP2's default of 100 would queue the fast
                // batch behind the silent one in the client.
                let settings = [HTTP2Setting(parameter: .maxConcurrentStreams, value: 1000)]
                return channel.configureHTTP2Pipeline(mode: .server, initialLocalSettings: settings) { stream in
                    stream.pipeline.addHandler(Stream(delay: delay, counters: counters))
                }.map { _ in }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return SilentHTTP2Server(port: channel.localAddress!.port!, channel: channel, counters: counters)
    }

    func stop() async { try? await channel.close() }

    private final class Stream: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTP2Frame.FramePayload
        typealias OutboundOut = HTTP2Frame.FramePayload
        let delay: TimeAmount
        let counters: Counters
        var path = ""

        init(delay: TimeAmount, counters: Counters) {
            self.delay = delay
            self.counters = counters
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .headers(let headers):
                path = headers.headers.first(name: ":path") ?? ""
                if headers.endStream { answer(context) }
            case .data(let data):
                if data.endStream { answer(context) }
            case .rstStream:
                counters.resets.add(1, ordering: .relaxed)
            default:
                break
            }
        }

        private func answer(_ context: ChannelHandlerContext) {
            guard path.hasPrefix("/fast/") else { return }
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: delay) {
                bound.value.writeAndFlush(
                    NIOAny(HTTP2Frame.FramePayload.headers(.init(headers: [":status": "200"], endStream: true))), promise: nil)
            }
        }
    }
}
