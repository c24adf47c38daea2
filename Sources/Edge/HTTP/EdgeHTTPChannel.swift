import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Hummingbird's `HTTP1Channel` pipeline, built the same way, with two differences: a connection's
/// `NIOAsyncChannel` finishes and closes itself when it is dropped unused, and
/// ``ConnectionPersistence`` answers HTTP/1.0 as RFC 9112 §9.3 asks.
///
/// Why: NIO's server bootstrap drops the `NIOAsyncChannel` of a connection it accepted just as the
/// listener closed (the child's set-up completes after the server's stream of connections has
/// finished, and `NIOAsyncChannelHandler` discards it). Hummingbird wraps each connection with
/// `NIOAsyncChannel(wrappingChannelSynchronously:)`, which does no teardown on deinit, so the
/// dropped writer trapped ("Deinited NIOAsyncWriter without calling finish()") and the whole edge
/// died in the middle of its drain, taking every in-flight request with it. Seen as exit status 4
/// (SIGILL) in the drain drill of OperationsTests under load, where clients connect until the
/// listener refuses them. NIO offers the teardown only through its deprecated
/// `init(synchronouslyWrapping:)`, reached through ``TeardownOnDeinit`` so the rest of the file
/// is not built against a deprecated API.
struct EdgeHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    let configuration: HTTP1Channel.Configuration

    init(responder: @escaping HTTPChannelHandler.Responder, configuration: HTTP1Channel.Configuration) {
        self.responder = responder
        self.configuration = configuration
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            var limits = NIOHTTPDecoderLimitConfiguration()
            limits.maxHeaderFieldSize = configuration.httpDecoder.maxHeaderFieldSize
            limits.maxHeaderListSize = configuration.httpDecoder.maxHeaderListSize
            limits.maxHeaderFieldCount = configuration.httpDecoder.maxHeaderFieldCount
            let pipeline = channel.pipeline.syncOperations
            try EdgeHTTP1Pipeline.configure(pipeline, limits: limits)
            try pipeline.addHandlers(configuration.additionalChannelHandlers())
            try pipeline.addHandler(
                HTTPConnectionStateHandler(idleTimeout: configuration.idleTimeout.map { .init($0) }, logger: logger))
            return try (TeardownOnDeinit.self as any AsyncChannelWrapping.Type).wrap(channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: value, logger: logger)
    }
}

/// The HTTP/1 handlers of an edge connection, from the bytes in to swift-http-types requests:
/// NIO's parser (llhttp) and encoder, ``ConnectionPersistence`` and the HTTP/1-to-HTTPTypes codec.
package enum EdgeHTTP1Pipeline {
    static func configure(_ pipeline: ChannelPipeline.SynchronousOperations, limits: NIOHTTPDecoderLimitConfiguration)
        throws
    {
        try pipeline.configureHTTPServerPipeline(
            withPipeliningAssistance: false,  // NIOAsyncChannel pipelines requests itself
            withErrorHandling: false,  // ConnectionGuard answers parser errors
            withOutboundHeaderValidation: false,  // swift-http-types validates
            withEncoderConfiguration: .init(),
            withDecoderLimitConfiguration: limits
        )
        try pipeline.addHandler(ConnectionPersistence())
        try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
    }

    /// The same handlers with Hummingbird's default limits, for the `http1` fuzz target.
    package static func configureForFuzzing(_ channel: any Channel) throws {
        let defaults = HTTP1Channel.Configuration().httpDecoder
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = defaults.maxHeaderFieldSize
        limits.maxHeaderListSize = defaults.maxHeaderListSize
        limits.maxHeaderFieldCount = defaults.maxHeaderFieldCount
        try configure(channel.pipeline.syncOperations, limits: limits)
    }
}

/// The one call of NIO's deprecated deinit-teardown wrapper (see ``EdgeHTTP1Channel``), behind a
/// protocol requirement so callers do not inherit its deprecation.
private protocol AsyncChannelWrapping {
    static func wrap(_ channel: any Channel) throws -> NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>
}

private enum TeardownOnDeinit: AsyncChannelWrapping {
    @available(*, deprecated, message: "wraps NIO's deinit-based teardown on purpose; see EdgeHTTP1Channel")
    static func wrap(_ channel: any Channel) throws -> NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart> {
        try NIOAsyncChannel(synchronouslyWrapping: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
    }
}

/// Whether a connection persists after an answer, decided per request as RFC 9112 §9.3 says and
/// Hummingbird does not: it sees requests as swift-http-types values, which carry no version.
///
/// - HTTP/1.0 without `Connection: keep-alive`, and any request with `Connection: close`: the
///   answer carries `Connection: close` and the connection closes after it. ApacheBench and other
///   HTTP/1.0 clients otherwise wait for a close that never comes.
/// - HTTP/1.0 with keep-alive: the answer says `Connection: keep-alive` when its length is known;
///   without a `Content-Length` it is delimited by the close (an HTTP/1.0 client cannot read
///   chunked framing), so the connection closes after it.
///
/// An answer to HTTP/1.0 is written as HTTP/1.0, so NIO's encoder frames it for that version.
/// Pipelined requests are answered in order, so their versions queue here in order.
final class ConnectionPersistence: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Version and keep-alive wish of each request read and not yet answered.
    private var pending: [(version: HTTPVersion, keepAlive: Bool)] = []
    /// The answer being written ends the connection.
    private var closeAfterAnswer = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data), pending.count < 64 {
            pending.append((head.version, head.isKeepAlive))
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head) where head.status.code >= 200:
            let request = pending.isEmpty ? (version: HTTPVersion.http1_1, keepAlive: true) : pending.removeFirst()
            // An answer that says close itself (the drain's) is closed by Hummingbird's handler.
            closeAfterAnswer = !request.keepAlive
            if request.version == .http1_0 {
                head.version = .http1_0
                if !closeAfterAnswer, !head.headers.contains(name: "content-length") { closeAfterAnswer = true }
                head.headers.replaceOrAdd(name: "connection", value: closeAfterAnswer ? "close" : "keep-alive")
            } else if closeAfterAnswer {
                head.headers.replaceOrAdd(name: "connection", value: "close")
            }
            context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .end where closeAfterAnswer:
            closeAfterAnswer = false
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(data).whenComplete { result in
                promise?.completeWith(result)
                bound.value.close(promise: nil)
            }
        default:
            context.write(data, promise: promise)
        }
    }
}
