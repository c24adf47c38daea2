import Foundation
import HeraldTestSupport
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import ProviderDoubles
import Synchronization
import Testing

@testable import PushProviders

@Suite("HTTP/2 pool", .watchedForStalls)
struct HTTP2PoolTests {
    /// A loopback port nothing listens on: bound, then closed.
    static func closedPort() throws -> Int {
        let socket = try LoopbackSocket(listening: false)
        socket.close()
        return socket.port
    }

    @Test("a push service that refuses connections: every request fails as ConnectionError, and nothing traps")
    func refusedConnection() async throws {
        // Each refused connection is torn down without ever being active; its readiness promise
        // once stayed pending, which NIO traps on in debug builds (dispatch died by SIGILL).
        let pool = try HTTP2Pool(
            url: "http://127.0.0.1:\(try Self.closedPort())", tls: nil, connections: 2, connectTimeout: .seconds(2))
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
        "a batch that times out resets no stream: its connection is retired, the other batch on it is answered, the next goes on a new one"
    )
    func timeoutRetires() async throws {
        // 300 unanswered streams reset at once once made NIOHTTP2's server (200 resets per 30 s)
        // close the connection, and the fast batch beside them failed with it. The order is
        // forced, not timed: the fast batch is on the wire before the slow one is sent, and its
        // answers are held back until the slow one has timed out.
        let server = try await SilentHTTP2Server.start()
        defer { Task { await server.stop() } }
        let pool = try HTTP2Pool(url: "http://127.0.0.1:\(server.port)", tls: nil, connections: 1)
        async let fast = pool.send(Self.requests("fast", 20), timeout: .seconds(30))
        try await Self.poll { server.fastReceived == 20 }
        let slowAnswers = await pool.send(Self.requests("slow", 300), timeout: .milliseconds(300))
        #expect(slowAnswers.allSatisfy { if case .failed(reason: "Timeout") = $0 { true } else { false } })
        server.release()
        let statuses = await fast.map { answer -> String in
            if case .answered(let status, _, _) = answer { "\(status)" } else { "\(answer)" }
        }
        #expect(statuses == Array(repeating: "200", count: 20))
        #expect(server.double.resets == 0)
        #expect(server.double.connections == 1)
        let next = await pool.send(Self.requests("fast", 1), timeout: .seconds(30))
        guard case .answered(200, _, _) = next.first else {
            Issue.record("after the retired connection: \(next)")
            return
        }
        #expect(server.double.connections == 2)
    }

    @Test(
        "a batch handed a connection that is retired before it is written goes to a new connection, not back as ConnectionError"
    )
    func retiredBeforeWritten() async throws {
        let server = try await SilentHTTP2Server.start()
        defer { Task { await server.stop() } }
        server.release()
        let pool = try HTTP2Pool(url: "http://127.0.0.1:\(server.port)", tls: nil, connections: 1)
        // What a busy machine can do: a batch is handed the connection, and before it reaches the
        // connection's event loop another batch's deadline retires it.
        let connection = try await pool.connection()
        let slowAnswers = await pool.send(Self.requests("slow", 5), timeout: .milliseconds(100))
        #expect(slowAnswers.allSatisfy { if case .failed(reason: "Timeout") = $0 { true } else { false } })
        let refused = await connection.send(Self.requests("fast", 3), timeout: .seconds(30))
        #expect(refused == nil, "a retired connection writes nothing and says so")
        #expect(server.fastReceived == 0)
        let answers = await pool.send(Self.requests("fast", 3), timeout: .seconds(30))
        #expect(answers.allSatisfy { if case .answered(200, _, _) = $0 { true } else { false } })
        #expect(server.double.connections == 2)
    }

    @Test("a pool's connections are served by different event loops, whatever else took a loop between its connects")
    func connectionsSpreadOverLoops() async throws {
        let loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator())
        guard loops.count >= 2 else { return }  // one core: one loop for everything
        let server = try await SilentHTTP2Server.start()
        defer { Task { await server.stop() } }
        let pool = try HTTP2Pool(url: "http://127.0.0.1:\(server.port)", tls: nil, connections: 2)
        // A batch held unanswered makes the first connection busy, so the next asks for a second;
        // meanwhile something else takes one loop fewer than there are, so that `next()` comes
        // round to the first connection's loop again.
        let first = try await pool.connection()
        async let held = pool.send(Self.requests("fast", HTTP2Pool.busy), timeout: .seconds(30))
        try await Self.poll { server.fastReceived == HTTP2Pool.busy }
        for _ in 1..<loops.count { _ = MultiThreadedEventLoopGroup.singleton.next() }
        let second = try await pool.connection()
        #expect(first !== second)
        #expect(first.eventLoop !== second.eventLoop)
        server.release()
        _ = await held
    }

    @Test(
        "batches sent at once on one connection, each longer than a turn of the loop writes, are all answered, on that connection"
    )
    func batchesInterleaved() async throws {
        let server = try await SilentHTTP2Server.start()
        defer { Task { await server.stop() } }
        server.release()
        let pool = try HTTP2Pool(url: "http://127.0.0.1:\(server.port)", tls: nil, connections: 1)
        // Written a few at a time per turn of the loop, from three batches queued together: the
        // streams must open in increasing order whatever batch they belong to.
        let size = HTTP2Connection.writesPerTurn * 5 + 3
        let answers = await withTaskGroup(of: [HTTP2Answer].self) { group in
            for lane in 0..<3 {
                group.addTask { await pool.send(Self.requests("fast/\(lane)", size), timeout: .seconds(30)) }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(answers.count == 3 * size)
        #expect(answers.allSatisfy { if case .answered(200, _, _) = $0 { true } else { false } })
        #expect(server.double.connections == 1)
        #expect(server.double.resets == 0)
    }

    /// Polls `condition` every 10 ms for up to 30 s.
    static func poll(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw PollTimeout() }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    struct PollTimeout: Error {}
}

/// The push double over HTTP/2 without TLS (prior knowledge), with NIOHTTP2's default protections
/// (200 RST_STREAM frames per 30 s, then GOAWAY) and APNs' 1,000 streams at once: it answers
/// `/fast/…` 200 once ``release()`` was called (at once after) and never answers `/slow/…`.
final class SilentHTTP2Server: Sendable {
    let double: PushDouble
    private let gate: Gate

    /// Answers held back until ``release()``.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, held: [@Sendable () -> Void])>((false, []))

        func hold(_ answer: @escaping @Sendable () -> Void) {
            let now = state.withLock { state -> Bool in
                if state.open { return true }
                state.held.append(answer)
                return false
            }
            if now { answer() }
        }

        func open() {
            let held = state.withLock { state -> [@Sendable () -> Void] in
                state.open = true
                defer { state.held = [] }
                return state.held
            }
            for answer in held { answer() }
        }
    }

    private init(double: PushDouble, gate: Gate) {
        self.double = double
        self.gate = gate
    }

    static func start() async throws -> SilentHTTP2Server {
        let gate = Gate()
        let double = try await PushDouble.start(.plaintext) { request, responder in
            guard request.path.hasPrefix("/fast/") else { return }
            gate.hold { responder.send(PushDouble.Reply(status: 200)) }
        }
        return SilentHTTP2Server(double: double, gate: gate)
    }

    var port: Int { double.port }
    /// The `/fast/…` requests read so far.
    var fastReceived: Int { double.requests.count { $0.path.hasPrefix("/fast/") } }

    /// Lets every `/fast/…` answer held so far, and later ones, go.
    func release() { gate.open() }

    func stop() async { await double.stop() }
}

@Suite("the push client's TLS context", .watchedForStalls)
struct PushClientTLSTests {
    @Test("made when the first pool is: a client with an unreadable CA file starts, and each pool it makes fails")
    func unreadableCAFile() async throws {
        let client = PushHTTP.makeClient(extraCAFile: "/nonexistent/herald-ca.pem")
        for _ in 0..<2 {
            #expect(throws: (any Error).self) { try client.pool(url: "https://127.0.0.1:1") }
        }
        try await client.shutdown()
    }
}
