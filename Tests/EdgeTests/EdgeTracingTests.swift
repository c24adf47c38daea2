import HTTPTypes
import HeraldTelemetry
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing
import Tracing

@testable import Edge

/// The edge's own server span (``EdgeTracingMiddleware``): the attributes Hummingbird's
/// `TracingMiddleware` wrote before it, the route as its name, the device handle redacted, and no
/// span at all for a request whose trace is not sampled.
@Suite("edge tracing middleware", .watchedForStalls)
struct EdgeTracingTests {
    static func withRouter(
        _ tracer: HeraldTracer, _ body: @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let router = Router(context: EdgeRequestContext.self)
        router.add(middleware: EdgeTracingMiddleware(tracer: tracer, errors: EdgeErrorMiddleware()))
        router.get("api/things/:id") { _, _ in "thing" }
        router.get("api/broken") { _, _ -> String in throw EdgeError(.serviceUnavailable, "down") }
        try await Application(router: router).test(.router) { client in try await body(client) }
    }

    @Test("a sampled request's span: named by its route, Hummingbird's attributes, the handle redacted")
    func recordedSpan() async throws {
        let (tracer, sink) = collectingTracer()
        try await Self.withRouter(tracer) { client in
            try await client.execute(
                uri: "/api/things/7?handle=secret-token&page=2", method: .get,
                headers: [.userAgent: "herald-test/1"]
            ) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/api/broken", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
            }
        }
        let spans = sink.all
        try #require(spans.count == 2, "\(spans.map(\.name))")
        let thing = spans[0]
        #expect(thing.name == "/api/things/{id}")
        #expect(thing.kind == .server)
        let attributes = thing.attributes
        #expect(attributes["http.request.method"]?.toSpanAttribute() == "GET")
        #expect(attributes["url.path"]?.toSpanAttribute() == "/api/things/7")
        #expect(attributes["url.query"]?.toSpanAttribute() == "handle=REDACTED&page=2")
        #expect(attributes["user_agent.original"]?.toSpanAttribute() == "herald-test/1")
        #expect(attributes["http.route"]?.toSpanAttribute() == "/api/things/{id}")
        #expect(attributes["http.response.status_code"]?.toSpanAttribute() == .int64(200))
        #expect(attributes["http.response.body.size"]?.toSpanAttribute() == .int64(5))
        #expect(attributes["client.address"] != nil)
        #expect(spans[1].name == "/api/broken")
        #expect(spans[1].attributes["http.response.status_code"]?.toSpanAttribute() == .int64(503))
    }

    @Test("a caller's unsampled trace records no span")
    func unsampledCaller() async throws {
        let (tracer, sink) = collectingTracer()
        try await Self.withRouter(tracer) { client in
            try await client.execute(
                uri: "/api/things/7", method: .get,
                headers: [HTTPField.Name("traceparent")!: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"]
            ) { response in
                #expect(response.status == .ok)
            }
        }
        #expect(sink.all.isEmpty)
    }

    @Test(
        "hostile values: overlong query, raw spaces and < > \" in it, lengths at Int64's ends, are recorded or left out, never trapped on"
    )
    func hostileValues() async throws {
        let (tracer, sink) = collectingTracer()
        let longQuery = "handle=" + String(repeating: "a", count: 60_000) + "&x=%zz&y=<b c\">"
        try await Self.withRouter(tracer) { client in
            for length in ["\(Int64.max)", "\(Int64.min)", "99999999999999999999999", "-1", "1e3"] {
                try await client.execute(
                    uri: "/api/things/7?\(longQuery)", method: .get,
                    headers: [.contentLength: length, .userAgent: "agent with spaces <>\""]
                ) { response in
                    #expect(response.status.code < 500, "Content-Length \(length)")
                }
            }
        }
        #expect(sink.all.count == 5)
        for span in sink.all {
            #expect(span.attributes["url.query"]?.toSpanAttribute() == "handle=REDACTED&x=%zz&y=<b c\">")
            #expect(span.attributes["user_agent.original"]?.toSpanAttribute() == "agent with spaces <>\"")
        }
        #expect(EdgeTracingMiddleware.redacted(longQuery) == "handle=REDACTED&x=%zz&y=<b c\">")
        #expect(EdgeTracingMiddleware.redacted("%zz=1&%=2&handle") == "%zz=1&%=2&handle=REDACTED")
    }

    @Test("the handle is redacted wherever it is in the query, and only the handle")
    func redaction() {
        #expect(EdgeTracingMiddleware.redacted("handle=a") == "handle=REDACTED")
        #expect(EdgeTracingMiddleware.redacted("x=1&handle=a&y=2") == "x=1&handle=REDACTED&y=2")
        #expect(EdgeTracingMiddleware.redacted("handles=a&x=handle") == "handles=a&x=handle")
        #expect(EdgeTracingMiddleware.redacted("page=2") == "page=2")
        #expect(EdgeTracingMiddleware.redacted("handle") == "handle=REDACTED")
        #expect(EdgeTracingMiddleware.redacted("x=%41&hand%6Ce=a") == "x=%41&handle=REDACTED")
    }
}
