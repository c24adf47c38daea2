import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Hummingbird's `HTTP1Channel` pipeline, built the same way, with one difference: a connection's
/// `NIOAsyncChannel` finishes and closes itself when it is dropped unused.
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
            try pipeline.configureHTTPServerPipeline(
                withPipeliningAssistance: false,  // NIOAsyncChannel pipelines requests itself
                withErrorHandling: false,  // ConnectionGuard answers parser errors
                withOutboundHeaderValidation: false,  // swift-http-types validates
                withEncoderConfiguration: .init(),
                withDecoderLimitConfiguration: limits
            )
            try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try pipeline.addHandlers(configuration.additionalChannelHandlers())
            try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: configuration.idleTimeout.map { .init($0) }, logger: logger))
            return try (TeardownOnDeinit.self as any AsyncChannelWrapping.Type).wrap(channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: value, logger: logger)
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
