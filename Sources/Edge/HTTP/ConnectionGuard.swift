import HTTPTypes
import HeraldModel
import HeraldRPC
import HeraldService
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

/// Per-connection deadlines, the drain's promise, and JSON answers for requests the HTTP parser
/// refuses.
///
/// Sits in each HTTP/1 connection's pipeline, after the parser (Hummingbird's
/// `additionalChannelHandlers`) and before Hummingbird's `HTTPConnectionStateHandler`, and does
/// three jobs Hummingbird leaves to the application:
///
/// - **Deadlines** (Slowloris): a connection must deliver a complete request head within
///   `headerTimeout` of opening or of its previous answer (so an idle keep-alive connection is
///   closed after it too), and the request's whole body within `bodyTimeout` of its head. A client
///   that dribbles one byte at a time resets no timer: the parser swallows partial heads, and only
///   whole parts reach this handler. While a route runs no timer is armed; the routes' RPC
///   deadlines bound that time.
/// - **Parse errors**: NIO's parser answers an oversized request line or header block, or a
///   malformed one, through Hummingbird with an empty 400. Here it gets the edge's JSON error body
///   (431 for headers over the limit), then the connection closes. An error in the middle of an
///   answer is passed on unchanged: writing a second answer would corrupt the first.
/// - **The drain** (SIGTERM): Hummingbird closes the listener and sends every open connection
///   `ChannelShouldQuiesceEvent`; its own handler then closes at once a connection with no request
///   in progress. That loses a request the client sent before the signal but the edge had not yet
///   read (it sits in the socket's buffer, or is still on its way): the client sees its
///   connection closed under a request it had sent (the drain drill's `remoteConnectionClosed`).
///   So the event stops here for an idle connection, which gets `drainIdleGrace` (never past its
///   header deadline) to deliver a head. A head that comes is passed on with the event behind it,
///   and answered; a connection that sends nothing in that time is closed, having lost nothing.
///   A connection with a request in progress gets the event at once: its answers end it. Every
///   answer written during the drain carries `Connection: close`, so no client sends another
///   request on a connection about to close. Go's `net/http` makes the same call for new
///   connections (`Server.Shutdown` leaves a connection that has not sent its first request alone
///   for 5 s).
final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private enum Phase {
        /// Waiting for a request head (new connection, or after an answer).
        case awaitingHead
        /// Head received; reading its body.
        case readingBody
        /// Request complete; a route is answering it.
        case answering
    }

    private let headerTimeout: TimeAmount
    private let bodyTimeout: TimeAmount
    private let logger: Logger
    private var phase = Phase.awaitingHead
    /// When the current phase must end; nil while a route answers.
    private var deadline: NIODeadline?
    /// What the deadline waits for, for the log.
    private var awaited = "request head"
    /// One check per connection, at the earliest deadline it knows. A new deadline only moves
    /// `deadline`: the check reschedules itself when it finds the deadline later than it was
    /// scheduled for, so a busy keep-alive connection schedules nothing per request.
    private var check: Scheduled<Void>?
    private var checkAt: NIODeadline?
    /// An answer has started (its head written) and not ended.
    private var answerInProgress = false
    /// Request heads read whose answers have not ended (more than one when a client pipelines).
    private var requestsInProgress = 0
    /// How long an idle connection may still deliver a request head once the drain starts.
    private let drainIdleGrace: TimeAmount
    /// The drain has started: answers carry `Connection: close`.
    private var draining = false
    /// The drain's event, held back from Hummingbird's handler while this connection is idle.
    private var quiesceHeld = false
    /// This connection is counted in ``connections``.
    private var counted = false

    /// Request heads read by the edge: what a drill waits on before it signals, instead of a sleep.
    static let heads = Counter(label: "herald_http_request_heads_total")
    /// Open HTTP connections.
    static let connections = Meter(label: "herald_http_connections")

    init(headerTimeout: TimeAmount, bodyTimeout: TimeAmount, drainIdleGrace: TimeAmount, logger: Logger) {
        self.headerTimeout = headerTimeout
        self.bodyTimeout = bodyTimeout
        self.drainIdleGrace = drainIdleGrace
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive {
            opened()
            arm(context, headerTimeout, "request head")
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        opened()
        if deadline == nil, phase == .awaitingHead { arm(context, headerTimeout, "request head") }
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        disarm()
    }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        if counted {
            counted = false
            Self.connections.decrement()
        }
        context.fireChannelInactive()
    }

    /// Counts this connection in ``connections`` once, whichever of `handlerAdded` and
    /// `channelActive` sees it active first.
    private func opened() {
        guard !counted else { return }
        counted = true
        Self.connections.increment()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            Self.heads.increment()
            requestsInProgress += 1
            phase = .readingBody
            arm(context, bodyTimeout, "request body")
        case .body:
            break
        case .end:
            phase = .answering
            deadline = nil
        }
        context.fireChannelRead(data)
        // The head that came during the drain's grace is in Hummingbird's handler now, so the event
        // makes it close the connection after this answer rather than at once.
        if quiesceHeld, requestsInProgress > 0 {
            quiesceHeld = false
            context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard event is ChannelShouldQuiesceEvent, !draining else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        draining = true
        guard requestsInProgress == 0 else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        quiesceHeld = true
        // Its header deadline, when it comes first, closes it anyway.
        if let deadline, deadline <= NIODeadline.now() + drainIdleGrace { return }
        arm(context, drainIdleGrace, "request head (draining)")
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head) where head.status.kind != .informational:
            answerInProgress = true
            if draining {
                head.headerFields[.connection] = "close"
                context.write(wrapOutboundOut(.head(head)), promise: promise)
                return
            }
        case .end:
            answerInProgress = false
            requestsInProgress = max(0, requestsInProgress - 1)
            // The next request's head is due; unless it is already being read (pipelining).
            if phase == .answering {
                phase = .awaitingHead
                arm(context, headerTimeout, "request head")
            }
        default:
            break
        }
        context.write(data, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parseError = error as? HTTPParserError, !answerInProgress else {
            context.fireErrorCaught(error)
            return
        }
        let answer: EdgeError =
            switch parseError {
            case .headerOverflow:
                EdgeError(
                    .init(code: 431, reasonPhrase: "Request Header Fields Too Large"),
                    "the request head is larger than the limit")
            default:
                EdgeError(.badRequest, "the request is not valid HTTP/1.1 (\(parseError))")
            }
        logger.info(
            "refused a malformed request",
            metadata: ["herald.error": "\(parseError)", "herald.status": "\(answer.status.code)"])
        disarm()
        var fields = answer.headerFields(requestID: newRequestID())
        let body = answer.jsonBody()
        fields[.contentLength] = String(body.count)
        fields[.connection] = "close"
        answerInProgress = true
        context.write(wrapOutboundOut(.head(HTTPResponse(status: answer.status, headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(ByteBuffer(bytes: body))), promise: nil)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in bound.value.close(promise: nil) }
    }

    private func arm(_ context: ChannelHandlerContext, _ timeout: TimeAmount, _ what: String) {
        let due = NIODeadline.now() + timeout
        deadline = due
        awaited = what
        if let checkAt, checkAt <= due { return }  // the pending check comes first and will move on
        schedule(context, at: due)
    }

    private func schedule(_ context: ChannelHandlerContext, at due: NIODeadline) {
        check?.cancel()
        checkAt = due
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        check = context.eventLoop.scheduleTask(deadline: due) {
            let (handler, context) = bound.value
            handler.fire(context)
        }
    }

    private func fire(_ context: ChannelHandlerContext) {
        check = nil
        checkAt = nil
        guard let deadline else { return }  // a route is answering; the next arm schedules again
        if deadline <= .now() {
            logger.debug("closing a connection that did not send its \(awaited) in time")
            context.close(promise: nil)
        } else {
            schedule(context, at: deadline)
        }
    }

    private func disarm() {
        check?.cancel()
        check = nil
        checkAt = nil
        deadline = nil
    }
}
