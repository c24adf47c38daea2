import HeraldTestSupport
import Testing
import Tracing

@testable import HeraldTelemetry

/// A recorded span's attributes kept as a list: the same answers as `SpanAttributes` for the same
/// sets, in the order first set.
@Suite("attribute list", .watchedForStalls)
struct AttributeListTests {
    @Test("set, replace and remove by key, as SpanAttributes does; the order is the first set's")
    func setReplaceRemove() {
        var list = AttributeList()
        var reference = SpanAttributes()
        let optionalText: String? = "agent"
        let noNumber: Int? = nil
        list["http.request.method"] = "GET"
        reference["http.request.method"] = "GET"
        list["http.response.status_code"] = 200
        reference["http.response.status_code"] = 200
        list["user_agent.original"] = optionalText
        reference["user_agent.original"] = optionalText
        list["http.response.body.size"] = noNumber
        reference["http.response.body.size"] = noNumber
        list["http.response.status_code"] = 503
        reference["http.response.status_code"] = 503
        list.set("rpc.method", .string("x"))
        list.set("rpc.method", nil)
        #expect(list.keys == ["http.request.method", "http.response.status_code", "user_agent.original"])
        #expect(list.value(of: "http.response.status_code") == .int64(503))
        #expect(list["user_agent.original"]?.toSpanAttribute() == "agent")
        #expect(list["rpc.method"] == nil && list["http.response.body.size"] == nil)
        #expect(list.count == 3)
        // Both ways to SpanAttributes agree with the reference.
        let back = list.spanAttributes
        var keys: [String] = []
        // swift-format-ignore: ReplaceForEachWithForLoop
        reference.forEach { key, value in
            keys.append(key)
            #expect(back[key]?.toSpanAttribute() == value)
        }
        #expect(keys.count == back.count)
        #expect(AttributeList(reference).count == 3)
    }

    /// A span that records nothing keeps none, and one that records gets each set in place.
    @Test func spanKeepsItsListInPlace() {
        let tracer = HeraldTracer(resource: [], sampler: .always) { _ in }
        let span = tracer.startSpan("a", context: .topLevel, ofKind: .server, at: DefaultTracerClock.now)
        span.setAttribute("herald.request_id", "r-1")
        span.setAttribute("herald.devices", 3)
        span.updateInPlace { $0["herald.hub"] = "hub" }
        #expect(span.attributes["herald.request_id"]?.toSpanAttribute() == "r-1")
        #expect(span.attributes["herald.devices"]?.toSpanAttribute() == .int64(3))
        #expect(span.attributes.count == 3)
        span.attributes = SpanAttributes(["only": .string("this")])
        #expect(span.attributes.count == 1)
        let off = HeraldTracer(resource: [], sampler: .never) { _ in }
            .startSpan("b", context: .topLevel, ofKind: .server, at: DefaultTracerClock.now)
        off.setAttribute("herald.request_id", "r-2")
        #expect(off.attributes.isEmpty)
    }
}
