import HeraldTestSupport
import Metrics
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import Testing

@testable import HeraldService

/// The internal services' `/metrics` listener, byte for byte through SwiftNIO's HTTP/1 parser:
/// what Prometheus sends is answered, and whatever else reaches the port gets a plain answer.
@Suite("metrics listener", .watchedForStalls)
struct MetricsHTTPTests {
    /// Sends `request` through a fresh pipeline, as `MetricsServer` builds it, and returns what was
    /// written back, and whether the connection is still open.
    static func exchange(_ request: String) throws -> (answer: String, open: Bool) {
        let channel = try Self.connection()
        do {
            try channel.writeInbound(ByteBuffer(string: request))
        } catch {
            // NIO's parser refused the bytes: its error handler has answered and closed.
        }
        var answer = ByteBuffer()
        while var part = try channel.readOutbound(as: ByteBuffer.self) { answer.writeBuffer(&part) }
        let open = channel.isActive
        _ = try? channel.finish()
        return (String(buffer: answer), open)
    }

    static func connection() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try MetricsHTTPHandler.configure(channel.pipeline.syncOperations)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    static func status(_ answer: String) -> String { answer.components(separatedBy: "\r\n").first ?? "" }

    @Test("GET /metrics, with or without a query: 200, Prometheus' text format and a length that matches")
    func metrics() throws {
        Counter(label: "herald_metrics_http_test_total").increment()
        for path in ["/metrics", "/metrics?name[]=x"] {
            let (answer, open) = try Self.exchange("GET \(path) HTTP/1.1\r\nHost: h\r\n\r\n")
            #expect(Self.status(answer) == "HTTP/1.1 200 OK", "\(path)")
            #expect(answer.contains("Content-Type: \(HeraldMetrics.contentType)\r\n"))
            let parts = answer.components(separatedBy: "\r\n\r\n")
            let length = answer.firstMatch(of: /Content-Length: (\d+)/).map { Int($0.1) } ?? nil
            #expect(length == parts.dropFirst().joined(separator: "\r\n\r\n").utf8.count)
            #expect(open, "keep-alive: Prometheus scrapes on one connection")
        }
    }

    @Test("other paths and methods: 404 with a short text body")
    func notFound() throws {
        for request in [
            "GET / HTTP/1.1\r\nHost: h\r\n\r\n", "GET /metricsx HTTP/1.1\r\n\r\n", "GET /metrics/ HTTP/1.1\r\n\r\n",
            "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", "DELETE /metrics HTTP/1.1\r\n\r\n",
        ] {
            let (answer, _) = try Self.exchange(request)
            #expect(Self.status(answer) == "HTTP/1.1 404 Not Found", "\(request.debugDescription)")
            #expect(answer.hasSuffix("\r\n\r\nnot found\n"))
        }
    }

    @Test("two requests pipelined on one connection get two answers, in order")
    func pipelined() throws {
        let (answer, _) = try Self.exchange("GET /nope HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n")
        let statuses = answer.matches(of: /HTTP\/1\.1 (\d{3})/).map { String($0.1) }
        #expect(statuses == ["404", "200"])
    }

    @Test("bytes that are not HTTP: 400 and the connection closed, nothing thrown past the pipeline")
    func malformed() throws {
        for junk in [
            "\u{0}\u{1}\u{2}\r\n\r\n", "GET /metrics HTTP/9.9\r\n\r\n", "GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n",
        ] {
            let (answer, open) = try Self.exchange(junk)
            #expect(Self.status(answer) == "HTTP/1.1 400 Bad Request", "\(junk.debugDescription): \(answer)")
            #expect(!open, "\(junk.debugDescription)")
        }
    }

    @Test("a connection that sends nothing within the idle timeout is closed by the listener (real sockets)")
    func idle() async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let server = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try MetricsHTTPHandler.configure(channel.pipeline.syncOperations, idleTimeout: .milliseconds(200))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { server.close(promise: nil) }
        let client = try await ClientBootstrap(group: group).connect(to: try #require(server.localAddress)).get()
        // The idle timer (the connection's only way to end here) closes it; a deadline, not a sleep.
        let closed = try await withThrowingTaskGroup(of: Bool.self) { tasks in
            tasks.addTask {
                try await client.closeFuture.get()
                return true
            }
            tasks.addTask {
                try await Task.sleep(for: .seconds(30))
                return false
            }
            defer { tasks.cancelAll() }
            return try await tasks.next() ?? false
        }
        #expect(closed, "still open 30 s after a 200 ms idle timeout")
        if !closed { try await client.close() }
    }
}
