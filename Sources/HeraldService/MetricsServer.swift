import Foundation
import HeraldModel
import HeraldRPC
public import Logging
import Metrics
import NIOCore
import NIOHTTP1
import NIOPosix
public import Prometheus
public import ServiceLifecycle
import Synchronization

/// The process's metrics: swift-metrics everywhere, exported in the Prometheus text format.
public enum HeraldMetrics {
    /// Every metric this process records, for ``MetricsServer`` and the edge's `/metrics`.
    public static let registry = PrometheusCollectorRegistry()

    /// Makes ``registry`` the backend of swift-metrics; once per process, before any metric.
    public static func bootstrap() {
        var factory = PrometheusMetricsFactory(registry: registry)
        // Latency buckets from 50 µs to 10 s: internal RPCs take tens of microseconds.
        factory.defaultDurationHistogramBuckets = [
            .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1),
            .milliseconds(2.5), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
            .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(10),
        ]
        MetricsSystem.bootstrap(factory)
    }

    /// The Prometheus text of everything recorded so far.
    public static func exposition() -> [UInt8] {
        registry.emitToBuffer()
    }

    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"
}

/// `GET /metrics` on its own HTTP listener (`metrics-listen host:port`), for the internal services,
/// which have no HTTP server otherwise: a few lines of SwiftNIO's HTTP/1 rather than a web framework
/// in every process. Writes its URL to `<runtime-dir>/<service>.metrics.url` once listening.
public struct MetricsServer: Service {
    let host: String
    let port: Int
    let urlFile: String
    let logger: Logger

    public init(host: String, port: Int, urlFile: String, logger: Logger) {
        self.host = host
        self.port = port
        self.urlFile = urlFile
        self.logger = logger
    }

    public func run() async throws {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try MetricsHTTPHandler.configure(channel.pipeline.syncOperations)
                }
            }
            .bind(host: host, port: port).get()
        let bound = channel.localAddress?.port ?? port
        let url = "http://\(host.contains(":") ? "[\(host)]" : host):\(bound)/metrics"
        try? Data((url + "\n").utf8).write(to: URL(fileURLWithPath: urlFile), options: .atomic)
        logger.info("metrics listening", metadata: ["herald.url": "\(url)"])
        try? await gracefulShutdown()
        try? await channel.close()
    }
}

/// Answers `GET /metrics` with the registry's text, anything else with 404; closes on an error.
final class MetricsHTTPHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    private var path = ""

    /// A connection that sends nothing for this long is closed: a scraper asks every 15 to 60 s,
    /// and connections left open by anything else must not pile up.
    static let idleTimeout = TimeAmount.minutes(2)

    /// A connection's pipeline: NIO's HTTP/1 server handlers, the idle timer, this handler.
    static func configure(_ pipeline: ChannelPipeline.SynchronousOperations, idleTimeout: TimeAmount = idleTimeout)
        throws
    {
        try pipeline.configureHTTPServerPipeline()
        try pipeline.addHandler(IdleStateHandler(allTimeout: idleTimeout))
        try pipeline.addHandler(MetricsHTTPHandler())
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            path = head.method == .GET ? String(head.uri.split(separator: "?").first ?? "") : ""
        case .body:
            break
        case .end:
            let found = path == "/metrics"
            let body = found ? HeraldMetrics.exposition() : Array("not found\n".utf8)
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: found ? HeraldMetrics.contentType : "text/plain")
            headers.add(name: "Content-Length", value: "\(body.count)")
            context.write(
                wrapOutboundOut(
                    .head(HTTPResponseHead(version: .http1_1, status: found ? .ok : .notFound, headers: headers))),
                promise: nil
            )
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }

    /// A request NIO's parser refused has had its 400 (`configureHTTPServerPipeline`'s error
    /// handler); the connection then closes rather than stay open with a parser that reads nothing.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
