import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// One connection: the last handler of its pipeline, seeing `HTTP2Frame`s (no stream channels).
///
/// Everything but `isUsable` is touched on its event loop only.
final class HTTP2Connection: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = Never
    typealias OutboundOut = HTTP2Frame

    /// Each stream's receive window: answers are small; a larger body is refused anyway.
    static let streamWindow = 65535
    /// Answers longer than this are cut (push services answer in a few hundred bytes).
    static let maxBody = 64 * 1024
    /// Stream ids run out at 2^31; a connection is replaced well before.
    static let lastStreamID: Int32 = Int32.max - 4096

    let eventLoop: any EventLoop
    /// Succeeds once the connection may carry requests (TLS done with h2 negotiated).
    let ready: EventLoopPromise<Void>
    private let waitsForALPN: Bool
    private let coalescer: FlushCoalescer
    private let usable = Atomic<Bool>(true)
    private let streamsInFlight = Atomic<Int>(0)
    private let lastActiveMs = Atomic<Int64>(Int64(Date().timeIntervalSince1970 * 1000))
    private var context: ChannelHandlerContext?
    private var nextStreamID: Int32 = 1
    private var exchanges: [Int32: Exchange] = [:]
    /// The reason of the requests the connection's loss fails (see `errorCaught`, `lossReason`).
    private var closeReason = "ConnectionError"
    /// Whether the connection presents a client certificate, and whether the service has sent
    /// anything on it yet (its SETTINGS come first, once the handshake is complete on its side).
    private let presentsCertificate: Bool
    private var serviceSpoke = false
    private var handshaken = false
    /// Bytes of DATA received since the connection window was last given back.
    private var unacknowledged = 0
    /// A batch went unanswered by its deadline: no new batch comes here, and the connection
    /// closes once the batches still on it are done (see ``expire(_:)``).
    private var retiring = false

    private struct Exchange {
        var batch: Batch
        var index: Int
        var status: Int?
        var headers = HPACKHeaders()
        var body: ByteBuffer?
    }

    /// One `send`: answers filled in as they come, one promise, one deadline. Used on the
    /// connection's event loop only.
    private final class Batch: @unchecked Sendable {
        var answers: [HTTP2Answer?]
        var streams: [Int32]
        var remaining: Int
        let promise: EventLoopPromise<[HTTP2Answer]?>
        var deadline: Scheduled<Void>?

        init(count: Int, promise: EventLoopPromise<[HTTP2Answer]?>) {
            answers = Array(repeating: nil, count: count)
            streams = Array(repeating: 0, count: count)
            remaining = count
            self.promise = promise
        }

        func complete(_ index: Int, _ answer: HTTP2Answer) {
            guard answers[index] == nil else { return }
            answers[index] = answer
            remaining -= 1
            if remaining == 0 {
                deadline?.cancel()
                promise.succeed(answers.compactMap { $0 })
            }
        }
    }

    init(eventLoop: any EventLoop, waitsForALPN: Bool, coalescer: FlushCoalescer, presentsCertificate: Bool = false) {
        self.presentsCertificate = presentsCertificate
        self.eventLoop = eventLoop
        ready = eventLoop.makePromise()
        self.waitsForALPN = waitsForALPN
        self.coalescer = coalescer
    }

    var isUsable: Bool { usable.load(ordering: .relaxed) }
    /// Requests sent and not yet answered (read from any thread).
    var inFlight: Int { streamsInFlight.load(ordering: .relaxed) }
    /// When a batch last ended on it, Unix ms.
    var lastActive: Int64 { lastActiveMs.load(ordering: .relaxed) }

    func close() {
        eventLoop.execute { self.context?.close(promise: nil) }
    }

    /// One answer per request; nil when the connection could no longer take the batch when it
    /// reached the event loop (nothing was written: the pool offers it another connection).
    func send(_ requests: [HTTP2Request], timeout: TimeAmount) async -> [HTTP2Answer]? {
        streamsInFlight.add(requests.count, ordering: .relaxed)
        defer {
            streamsInFlight.subtract(requests.count, ordering: .relaxed)
            lastActiveMs.store(Int64(Date().timeIntervalSince1970 * 1000), ordering: .relaxed)
        }
        let promise = eventLoop.makePromise(of: [HTTP2Answer]?.self)
        eventLoop.execute { self.start(requests, timeout: timeout, promise: promise) }
        do { return try await promise.futureResult.get() } catch {
            return Array(repeating: .failed(reason: "ConnectionError"), count: requests.count)
        }
    }

    private func start(_ requests: [HTTP2Request], timeout: TimeAmount, promise: EventLoopPromise<[HTTP2Answer]?>) {
        guard context != nil, isUsable, nextStreamID + 2 * Int32(unwritten + requests.count) < Self.lastStreamID else {
            usable.store(false, ordering: .relaxed)
            promise.succeed(nil)
            return
        }
        let batch = Batch(count: requests.count, promise: promise)
        batch.deadline = eventLoop.scheduleTask(in: timeout) { [weak self] in self?.expire(batch) }
        queue.append(Queued(requests: requests, next: 0, batch: batch))
        unwritten += requests.count
        if nextStreamID + 2 * Int32(unwritten) >= Self.lastStreamID { usable.store(false, ordering: .relaxed) }
        if !draining { drain() }
    }

    /// Requests written per turn of the event loop. Encoding a request (HPACK, the HTTP/2 state
    /// machines, TLS) is microseconds in a release build and up to a millisecond in a debug one:
    /// a batch of 500 written in one go held the loop, and every other connection and timer on
    /// it, for up to 15 s in the debug test process beside ProcessTests (the stall watch).
    static let writesPerTurn = 8

    /// A batch waiting to be written, from its request `next` on.
    private struct Queued {
        var requests: [HTTP2Request]
        var next: Int
        let batch: Batch
    }
    /// Batches in the order they came; their requests are written in that order, so stream ids
    /// only grow on the connection (a stream opened below one already open is a protocol error).
    private var queue = CircularBuffer<Queued>()
    /// Requests queued and not written yet.
    private var unwritten = 0
    /// Whether a turn of the loop will write more of the queue.
    private var draining = false

    /// Writes up to ``writesPerTurn`` queued requests, and schedules the rest for a later turn of
    /// the loop. On a connection gone meanwhile, what was not written fails as its loss would.
    private func drain() {
        draining = false
        guard let context, context.channel.isActive else {
            while let queued = queue.popFirst() {
                for index in queued.next..<queued.requests.count {
                    queued.batch.complete(index, .failed(reason: lossReason))
                }
            }
            unwritten = 0
            return
        }
        // A flush per request keeps the streams' DATA frames in order: NIOHTTP2's flow-control
        // buffer sends the streams flushed together in no particular order, so the answers came
        // back shuffled, and each closed stream left the middle of NIO's stream map (a shift of
        // the streams behind it: 8% of dispatch's CPU at 1,000 open streams). The coalescer below
        // the HTTP/2 handler turns those flushes into one write to TLS and the socket.
        coalescer.hold()
        defer { coalescer.release() }
        var budget = Self.writesPerTurn
        while budget > 0, var head = queue.first {
            // A batch whose deadline passed before it was all written is answered: no more of it.
            guard head.batch.remaining > 0 else {
                unwritten -= head.requests.count - head.next
                queue.removeFirst()
                continue
            }
            write(head.requests[head.next], index: head.next, of: head.batch, context: context)
            head.next += 1
            unwritten -= 1
            budget -= 1
            if head.next == head.requests.count { queue.removeFirst() } else { queue[queue.startIndex] = head }
        }
        guard !queue.isEmpty else { return }
        draining = true
        let bound = NIOLoopBound(self, eventLoop: eventLoop)
        eventLoop.execute { bound.value.drain() }
    }

    /// Opens the next stream for request `index` of `batch`.
    private func write(_ request: HTTP2Request, index: Int, of batch: Batch, context: ChannelHandlerContext) {
        let id = nextStreamID
        nextStreamID += 2
        batch.streams[index] = id
        exchanges[id] = Exchange(batch: batch, index: index)
        let streamID = HTTP2StreamID(id)
        let hasBody = request.body.readableBytes > 0
        // The last frame's promise reports the request's fate: if an earlier frame failed, so does it.
        let written = eventLoop.makePromise(of: Void.self)
        written.futureResult.whenFailure { [weak self] _ in self?.finish(id, .failed(reason: "ConnectionError")) }
        context.write(
            wrapOutboundOut(
                HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: request.headers, endStream: !hasBody)))),
            promise: hasBody ? nil : written)
        if hasBody {
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: streamID, payload: .data(.init(data: .byteBuffer(request.body), endStream: true)))
                ),
                promise: written)
        }
        context.flush()
    }

    /// The batch's deadline: what is still unanswered times out.
    ///
    /// Its streams are not reset one by one. Servers count RST_STREAM frames against the HTTP/2
    /// rapid-reset attack (NIOHTTP2 allows 200 per 30 s, then answers GOAWAY and closes; nghttp2
    /// and Go's server limit them too): a timed-out batch of a few hundred pushes got the
    /// connection closed, and every other batch on it failed with it, to be sent again, which
    /// timed out again on a loaded machine (the replica drill's retry storm). Instead the
    /// connection is retired: later batches go to a fresh one, and this one closes when its other
    /// batches are done, taking the streams left open with it. A late answer is ignored.
    private func expire(_ batch: Batch) {
        var abandoned = false
        for (index, id) in batch.streams.enumerated() where batch.answers[index] == nil {
            if exchanges.removeValue(forKey: id) != nil { abandoned = true }
            batch.complete(index, .failed(reason: PushHTTP.timeoutReason))
        }
        guard abandoned else { return }
        retiring = true
        usable.store(false, ordering: .relaxed)
        closeIfDrained()
    }

    private func finish(_ id: Int32, _ answer: HTTP2Answer) {
        guard let exchange = exchanges.removeValue(forKey: id) else { return }
        exchange.batch.complete(exchange.index, answer)
        closeIfDrained()
    }

    /// Closes a retiring connection once no batch waits on it.
    private func closeIfDrained() {
        guard retiring, exchanges.isEmpty, queue.isEmpty, let context else { return }
        context.close(promise: nil)
    }

    private func finishAnswered(_ id: Int32) {
        guard let exchange = exchanges[id] else { return }
        if let status = exchange.status {
            finish(id, .answered(status: status, headers: exchange.headers, body: exchange.body ?? ByteBuffer()))
        } else {
            finish(id, .failed(reason: "ConnectionError"))
        }
    }

    // MARK: channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if !waitsForALPN, context.channel.isActive { ready.succeed() }
    }

    func channelActive(context: ChannelHandlerContext) {
        if !waitsForALPN { ready.succeed() }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        serviceSpoke = true
        let frame = unwrapInboundIn(data)
        let id = Int32(Int(frame.streamID))
        switch frame.payload {
        case .headers(let block):
            guard let exchange = exchanges[id] else { return }
            if exchange.status == nil {
                guard let status = block.headers.first(name: ":status").flatMap({ Int($0) }) else {
                    finish(id, .failed(reason: "ConnectionError"))
                    return
                }
                // 1xx: an interim answer; the final one follows.
                if status < 200 { return }
                exchanges[id]?.status = status
                exchanges[id]?.headers = block.headers
            }
            if block.endStream { finishAnswered(id) }
        case .data(let data):
            unacknowledged += data.data.readableBytes + (data.paddingBytes ?? 0)
            if unacknowledged >= 32768 {
                // The connection's receive window is ours to give back (there is no stream multiplexer).
                context.writeAndFlush(
                    wrapOutboundOut(
                        HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unacknowledged))),
                    promise: nil)
                unacknowledged = 0
            }
            guard exchanges[id] != nil else { return }
            if case .byteBuffer(var bytes) = data.data {
                // In place (optional chaining): a copy of the exchange would make the append copy the body.
                let room = Self.maxBody - (exchanges[id]?.body?.readableBytes ?? 0)
                if room > 0 {
                    if bytes.readableBytes > room { bytes.moveWriterIndex(to: bytes.readerIndex + room) }
                    if exchanges[id]?.body == nil {
                        exchanges[id]?.body = bytes
                    } else {
                        exchanges[id]?.body?.writeImmutableBuffer(bytes)
                    }
                }
            }
            if data.endStream { finishAnswered(id) }
        case .rstStream:
            finish(id, .failed(reason: "StreamReset"))
        case .goAway(let lastStreamID, _, _):
            // Streams above lastStreamID were never processed: safe to send again elsewhere.
            usable.store(false, ordering: .relaxed)
            let last = Int32(Int(lastStreamID))
            for stream in exchanges.keys where stream > last { finish(stream, .failed(reason: "ConnectionError")) }
        default:
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = event {
            handshaken = true
            if negotiated == "h2" {
                ready.succeed()
            } else {
                ready.fail(HTTP2PoolError("the push service did not offer HTTP/2 in ALPN", noHTTP2: true))
                context.close(promise: nil)
            }
        } else if let event = event as? StreamClosedEvent, event.reason != nil {
            finish(Int32(Int(event.streamID)), .failed(reason: "StreamReset"))
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? NIOHTTP2Errors.StreamError {
            finish(Int32(Int(error.streamID)), .failed(reason: "StreamReset"))
            return
        }
        // TLS 1.3 lets the client finish its handshake before the service checks the client's
        // certificate: the refusal arrives as an error after `ready`, and fails what was sent.
        closeReason = HTTP2Pool.reason(for: error)
        ready.fail(HTTP2PoolError(String(describing: error), reason: lossReason))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        usable.store(false, ordering: .relaxed)
        let reason = lossReason
        ready.fail(HTTP2PoolError("connection closed", reason: reason))
        for id in Array(exchanges.keys) { finish(id, .failed(reason: reason)) }
        context.fireChannelInactive()
    }

    /// Why the requests on a lost connection failed. TLS 1.3 lets the client finish its handshake
    /// before the service checks the client's certificate; the service's alert then races the
    /// close (a reset can discard it unread). A connection that presented a certificate and was
    /// closed before the service sent a single frame (its SETTINGS come at once after the
    /// handshake) was refused for that certificate, alert read or not.
    private var lossReason: String {
        if closeReason == "ConnectionError", presentsCertificate, handshaken, !serviceSpoke {
            return HTTP2Pool.certificateRejected
        }
        return closeReason
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        // A connection refused or reset before it was ever active is torn down without
        // channelInactive: `ready` must still end (NIO traps on a promise left pending at deinit in
        // debug builds; the CI's crash drill met it as dispatch's SIGILL). A promise already
        // completed ignores this.
        let reason = lossReason
        ready.fail(HTTP2PoolError("connection closed", reason: reason))
        for id in Array(exchanges.keys) { finish(id, .failed(reason: reason)) }
    }
}

/// Holds the flushes that come down the pipeline while a batch is written, and flushes once
/// when it is done (see ``HTTP2Connection``'s `start`). Outside a batch it lets every flush by.
/// Used on its channel's event loop only.
final class FlushCoalescer: ChannelOutboundHandler, @unchecked Sendable {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private var context: ChannelHandlerContext?
    private var holding = false
    private var pending = false

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func flush(context: ChannelHandlerContext) {
        if holding { pending = true } else { context.flush() }
    }

    func hold() { holding = true }

    func release() {
        holding = false
        if pending {
            pending = false
            context?.flush()
        }
    }
}
