import Foundation
public import NIOCore
public import NIOHPACK
import NIOHTTP2
import NIOPosix
public import NIOSSL
import NIOTLS
import Synchronization

/// One request of a batch sent over ``HTTP2Pool``: every header, pseudo-headers first, and a body.
public struct HTTP2Request: Sendable {
    public var headers: HPACKHeaders
    public var body: ByteBuffer

    public init(headers: HPACKHeaders, body: ByteBuffer) {
        self.headers = headers
        self.body = body
    }
}

/// What became of one request: the service's answer, or why there is none (`Timeout`,
/// `ConnectionError` when it was never processed or the connection was lost, `StreamReset`).
public enum HTTP2Answer: Sendable {
    case answered(status: Int, headers: HPACKHeaders, body: ByteBuffer)
    case failed(reason: String)
}

/// A few HTTP/2 connections to one push service, each carrying whole batches of requests.
///
/// This is the lean path of the APNs sender: AsyncHTTPClient spent ~294 µs of CPU per
/// push, spread over a Swift task, a child channel, a scheduled timeout and header conversions per
/// request. Here a batch is written frame by frame on the connection's event loop (no stream
/// channels: the handler matches frames to requests by stream id), flushed once, answered into one
/// promise, and guarded by one deadline. Headers are HPACK-friendly: the constant ones (the provider
/// token, the topic) are indexed once per connection; the per-push ones (`:path`, `apns-id`) are
/// literals that do not churn the dynamic table.
///
/// Connections open on first use and are replaced once they fail, are told GOAWAY, use up their
/// stream ids, or leave a batch unanswered by its deadline; a batch goes to the first that is not
/// busy. A request that never reached the service comes back `ConnectionError`, which the senders
/// retry.
public final class HTTP2Pool: Sendable {
    /// `host[:port]`, as `:authority` carries it.
    public let authority: String
    public let scheme: String
    private let host: String
    private let port: Int
    private let tls: NIOSSLContext?
    /// Whether `tls` presents a client certificate (APNs' certificate-based auth).
    private let presentsCertificate: Bool
    /// Each slot's event loop: slot `i` connects on `loops[i]`, so a pool's connections are served
    /// by different threads. Left to `group.next()`, they were not always: anything else in the
    /// process that took a loop between two connects (an RPC client, another pool) could put both
    /// on one thread, and a fan-out then had one core pushing while the other waited (about 10% of the APNs broadcast's rate, in one run out of two or so).
    private let loops: [any EventLoop]
    private let connectTimeout: TimeAmount
    private let slots: Mutex<[Slot]>
    private let refusedHTTP2 = Atomic<Bool>(false)

    /// The reason of every answer of a batch when the service does not offer HTTP/2 in ALPN.
    public static let noHTTP2 = "NoHTTP2"

    /// False once a connection found the service does not offer HTTP/2 (the caller falls back).
    public var offersHTTP2: Bool { !refusedHTTP2.load(ordering: .relaxed) }

    private enum Slot {
        case empty
        case connecting(EventLoopFuture<HTTP2Connection>)
        case ready(HTTP2Connection)
    }

    /// `url`: `https://host[:port]` (or `http://` for a cleartext HTTP/2 double). `tls`: the client
    /// context (ALPN must offer h2); `presentsCertificate`: whether it presents a client certificate.
    public init(
        url: String, tls: NIOSSLContext?, presentsCertificate: Bool = false, connections: Int = 2,
        connectTimeout: Duration = .seconds(10)
    ) throws {
        self.presentsCertificate = presentsCertificate
        guard let parsed = Self.parse(url) else { throw HTTP2PoolError("not an http(s)://host[:port] URL") }
        (scheme, host, port) = parsed
        let defaultPort = scheme == "https" ? 443 : 80
        authority = port == defaultPort ? host : "\(host):\(port)"
        self.tls = scheme == "https" ? tls : nil
        let group = MultiThreadedEventLoopGroup.singleton
        let all = Array(group.makeIterator())
        // Pools start where the last one stopped: two pools of two connections on four loops use all four.
        let count = UInt(max(1, connections))
        let first = Self.nextLoop.wrappingAdd(count, ordering: .relaxed).oldValue
        loops = (0..<count).map { all.isEmpty ? group.next() : all[Int((first &+ $0) % UInt(all.count))] }
        self.connectTimeout = .nanoseconds(connectTimeout.wholeNanoseconds)
        slots = Mutex(Array(repeating: .empty, count: max(1, connections)))
    }

    /// Where the next pool's first connection goes among the event loops.
    private static let nextLoop = Atomic<UInt>(0)

    deinit {
        slots.withLock { state in
            for case .ready(let connection) in state { connection.close() }
        }
    }

    /// Sends every request, at most `timeout` for the whole batch; one answer per request, in order.
    ///
    /// A batch handed a connection that was retired or lost before the batch reached its event
    /// loop (a busy machine can let another batch's deadline pass in between) wrote nothing: it
    /// goes to another connection, up to ``attempts`` times, rather than failing a whole round
    /// the outbox would have to retry.
    public func send(_ requests: [HTTP2Request], timeout: Duration) async -> [HTTP2Answer] {
        guard !requests.isEmpty else { return [] }
        var reason = "ConnectionError"
        for _ in 0..<Self.attempts {
            let connection: HTTP2Connection
            do { connection = try await self.connection() } catch {
                if (error as? HTTP2PoolError)?.noHTTP2 == true {
                    refusedHTTP2.store(true, ordering: .relaxed)
                    return Array(repeating: .failed(reason: Self.noHTTP2), count: requests.count)
                }
                reason = Self.reason(for: error)
                break
            }
            if let answers = await connection.send(requests, timeout: .nanoseconds(timeout.wholeNanoseconds)) {
                return answers
            }
        }
        return Array(repeating: .failed(reason: reason), count: requests.count)
    }

    /// The reason of every answer of a batch whose connection the service closed with a TLS alert
    /// about the client's certificate (APNs refusing a provider certificate: unknown, revoked,
    /// ended, or none sent where one is required).
    public static let certificateRejected = "CertificateRejected"

    /// Why a connection failed, as the answers of its requests say it: ``certificateRejected`` for
    /// the peer's alert about the certificate this side presented (BoringSSL names the alert it
    /// received `…ALERT_BAD_CERTIFICATE`, `…ALERT_CERTIFICATE_REQUIRED`, `…ALERT_UNKNOWN_CA`…);
    /// anything else, our own refusal of the service's certificate included, `ConnectionError`.
    static func reason(for error: any Error) -> String {
        if let reason = (error as? HTTP2PoolError)?.reason { return reason }
        let text = String(describing: error).uppercased()
        let alerts = [
            "ALERT_BAD_CERTIFICATE", "ALERT_CERTIFICATE_REQUIRED", "ALERT_CERTIFICATE_EXPIRED",
            "ALERT_CERTIFICATE_REVOKED", "ALERT_CERTIFICATE_UNKNOWN", "ALERT_UNKNOWN_CA",
            "ALERT_UNSUPPORTED_CERTIFICATE",
            "ALERT_ACCESS_DENIED", "ALERT_HANDSHAKE_FAILURE",
        ]
        return alerts.contains { text.contains($0) } ? certificateRejected : "ConnectionError"
    }

    /// Connections a batch is offered before it fails as `ConnectionError` without being written.
    static let attempts = 3

    /// Streams in flight beyond which a connection counts as busy and the next batch goes to
    /// another one (APNs lets a connection carry about 1,000).
    static let busy = 500
    /// A connection idle this long is closed and opened anew on next use, rather than trusted
    /// after a NAT or load balancer on the way may have dropped it silently (a write into such a
    /// connection would wait for the batch's deadline).
    static let idleLimit: Int64 = 5 * 60 * 1000

    private enum Choice {
        case use(HTTP2Connection)
        case wait(EventLoopFuture<HTTP2Connection>)
        case opened(EventLoopFuture<HTTP2Connection>, slot: Int)
        /// No slot at all (never: a pool has at least one).
        case none
    }

    /// A connection for the next batch: the first open one that is not busy; else one being
    /// opened; else a new one in a free slot; else the least busy. So a light load keeps to one
    /// connection, and a heavy one spreads over all.
    func connection() async throws -> HTTP2Connection {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let choice = slots.withLock { state -> Choice in
            var least: HTTP2Connection?
            var pending: EventLoopFuture<HTTP2Connection>?
            var free: Int?
            for (index, slot) in state.enumerated() {
                if case .ready(let connection) = slot, connection.isUsable, connection.inFlight == 0,
                    now - connection.lastActive > Self.idleLimit
                {
                    connection.close()
                    state[index] = .empty
                    if free == nil { free = index }
                    continue
                }
                switch slot {
                case .ready(let connection) where connection.isUsable:
                    if connection.inFlight < Self.busy { return .use(connection) }
                    if connection.inFlight < least?.inFlight ?? Int.max { least = connection }
                case .connecting(let future):
                    if pending == nil { pending = future }
                case .ready, .empty:
                    if free == nil { free = index }
                }
            }
            if let pending { return .wait(pending) }
            if let free {
                let future = connect(on: loops[free])
                state[free] = .connecting(future)
                return .opened(future, slot: free)
            }
            // Every slot is open and usable here (any other would be pending or free): least is set.
            return least.map(Choice.use) ?? .none
        }
        switch choice {
        case .use(let connection):
            return connection
        case .wait(let future):
            return try await future.get()
        case .none:
            throw HTTP2PoolError("the pool has no connection slots")
        case .opened(let future, let index):
            // Registered outside the lock: a callback may run at once.
            future.whenComplete { result in
                self.slots.withLock { state in
                    guard case .connecting(let pending) = state[index], pending === future else { return }
                    switch result {
                    case .success(let connection): state[index] = .ready(connection)
                    case .failure: state[index] = .empty
                    }
                }
            }
            return try await future.get()
        }
    }

    private func connect(on loop: any EventLoop) -> EventLoopFuture<HTTP2Connection> {
        let tls = self.tls
        let presentsCertificate = self.presentsCertificate
        let host = self.host
        // SNI never carries an IP address; NIOSSL then checks the certificate against the peer's IP.
        let sniName: String? = (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
        return ClientBootstrap(group: loop)
            .connectTimeout(connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            // One read of at most 16 KiB per turn of the loop (NIO's default: four of up to 64 KiB):
            // a burst of answers is a few hundred frames a turn, not thousands, so a fan-out's
            // answers never hold the loop from the other connections and timers on it.
            .channelOption(.maxMessagesPerRead, value: 1)
            .channelOption(
                .recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 1024, initial: 4096, maximum: 16384)
            )
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try Self.configure(
                        channel, tls: tls.map { ($0, sniName) }, presentsCertificate: presentsCertificate)
                }
            }
            .connect(host: host, port: port)
            .flatMap { channel in
                channel.pipeline.handler(type: HTTP2Connection.self).flatMap { connection in
                    connection.ready.futureResult.map { connection }
                }
            }
    }

    /// A connection's handlers: TLS (when `tls` is given, with its SNI name), the flush
    /// coalescer, NIO's HTTP/2 client and ``HTTP2Connection``, which is returned.
    static func configure(
        _ channel: any Channel, tls: (context: NIOSSLContext, sniName: String?)?, presentsCertificate: Bool
    ) throws -> HTTP2Connection {
        let coalescer = FlushCoalescer()
        let connection = HTTP2Connection(
            eventLoop: channel.eventLoop, waitsForALPN: tls != nil, coalescer: coalescer,
            presentsCertificate: tls != nil && presentsCertificate)
        let pipeline = channel.pipeline.syncOperations
        if let tls {
            try pipeline.addHandler(try NIOSSLClientHandler(context: tls.context, serverHostname: tls.sniName))
        }
        try pipeline.addHandler(coalescer)
        try pipeline.addHandler(
            NIOHTTP2Handler(
                mode: .client,
                initialSettings: [
                    HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
                    HTTP2Setting(parameter: .initialWindowSize, value: HTTP2Connection.streamWindow),
                    HTTP2Setting(parameter: .maxHeaderListSize, value: 16384),
                ]))
        try pipeline.addHandler(connection)
        return connection
    }

    /// The handlers of a plain-text connection on `channel`, for the `http2` fuzz target, which
    /// feeds them what a push service (or anyone on the path) could send.
    package static func configureForFuzzing(_ channel: any Channel) throws {
        _ = try configure(channel, tls: nil, presentsCertificate: false)
    }

    static func parse(_ url: String) -> (scheme: String, host: String, port: Int)? {
        let scheme: String
        var rest: Substring
        if url.hasPrefix("https://") {
            scheme = "https"
            rest = url.dropFirst(8)
        } else if url.hasPrefix("http://") {
            scheme = "http"
            rest = url.dropFirst(7)
        } else {
            return nil
        }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        var host = rest
        var port = scheme == "https" ? 443 : 80
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                guard let value = Int(after.dropFirst()) else { return nil }
                port = value
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            guard let value = Int(rest[rest.index(after: colon)...]) else { return nil }
            port = value
        }
        guard !host.isEmpty, (1...65535).contains(port) else { return nil }
        return (scheme, String(host), port)
    }
}

public struct HTTP2PoolError: Error, CustomStringConvertible {
    public var description: String
    /// The service answered TLS without h2 in ALPN.
    var noHTTP2 = false
    /// The reason the requests fail with, when it is not `ConnectionError`.
    var reason: String?
    init(_ description: String, noHTTP2: Bool = false, reason: String? = nil) {
        self.description = description
        self.noHTTP2 = noHTTP2
        self.reason = reason
    }
}

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
