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
