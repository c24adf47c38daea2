import HeraldModel
import HeraldTestSupport
import Synchronization
import Testing
import Tracing
import W3CTraceContext

@testable import HeraldRPC
@testable import HeraldTelemetry

/// The tracer, the W3C propagation and the OTel settings, without a process or a collector
/// (ProcessTests.TracingTests runs them across the real stack into an OTLP receiver).
@Suite("tracing", .watchedForStalls)
struct TracerTests {
    static func tracer(
        _ sampler: TraceSampler = .always, parentBased: Bool = true
    ) -> (HeraldTracer, CollectedSpans) {
        collectingTracer(sampler, parentBased: parentBased)
    }

    struct DictionaryCarrier: Extractor, Injector {
        func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
        func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
    }

    @Test("a child span shares its parent's trace and names it; spans reach the sink only when they end")
    func parentAndChild() async throws {
        let (tracer, collected) = Self.tracer()
        let parent = tracer.startSpan("parent", context: .topLevel, ofKind: .server, at: DefaultTracerClock.now)
        let child = tracer.startSpan("child", context: parent.context, ofKind: .client, at: DefaultTracerClock.now)
        child.attributes["n"] = 3
        child.end()
        #expect(collected.all.map(\.name) == ["child"])
        parent.end()
        parent.end()  // a second end is ignored
        let spans = collected.all
        #expect(spans.map(\.name) == ["child", "parent"])
        #expect(spans[0].trace.traceID == spans[1].trace.traceID)
        #expect(spans[0].parentSpanID == spans[1].trace.spanID)
        #expect(spans[1].parentSpanID == nil)
        #expect(spans[0].attributes["n"]?.toSpanAttribute() == .int64(3))
    }

    @Test("traceparent in, traceparent out: the caller's trace id and sampled flag are kept; junk starts a new trace")
    func propagation() {
        let (tracer, collected) = Self.tracer(.never)
        var context = InstrumentationContext.topLevel
        tracer.extract(
            ["traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "v=1"],
            into: &context, using: DictionaryCarrier())
        let span = tracer.startSpan("s", context: context, ofKind: .server, at: DefaultTracerClock.now)
        var carrier: [String: String] = [:]
        tracer.inject(span.context, into: &carrier, using: DictionaryCarrier())
        let sent = carrier["traceparent"] ?? ""
        #expect(sent.hasPrefix("00-4bf92f3577b34da6a3ce929d0e0e4736-") && sent.hasSuffix("-01"))
        #expect(!sent.contains("00f067aa0ba902b7"), "a new span id")
        #expect(carrier["tracestate"] == "v=1")
        span.end()
        // Sampled by the parent though the sampler says never (parent-based).
        #expect(collected.all.first?.parentSpanID.map { "\($0)" } == "00f067aa0ba902b7")

        for junk in [
            "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01", String(repeating: "0", count: 10_000),
        ] {
            var fresh = InstrumentationContext.topLevel
            tracer.extract(["traceparent": junk], into: &fresh, using: DictionaryCarrier())
            #expect(fresh.traceContext == nil, "\(junk.prefix(60))")
        }
    }

    @Test("samplers: never records nothing; a ratio decides the same way for the same trace id in every process")
    func sampling() {
        let (never, none) = Self.tracer(.never)
        never.startSpan("x", context: .topLevel, ofKind: .internal, at: DefaultTracerClock.now).end()
        #expect(none.all.isEmpty)
        let (half, some) = Self.tracer(.ratio(0.5))
        for _ in 0..<400 {
            half.startSpan("x", context: .topLevel, ofKind: .internal, at: DefaultTracerClock.now).end()
        }
        #expect((100...300).contains(some.all.count), "\(some.all.count) of 400 at 0.5")
        let id = TraceID.random()
        #expect(TraceSampler.ratio(0.3).samples(id) == TraceSampler.ratio(0.3).samples(id))
    }

    @Test(
        "under an unsampled parent a span records nothing, takes no attributes and passes the parent's context on as it arrived"
    )
    func unsampledPassesThrough() throws {
        let (tracer, sink) = Self.tracer(.always)
        let parent = try #require(
            HeraldTracing.parse(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", tracestate: nil)
        )
        var context = InstrumentationContext.topLevel
        context.traceContext = parent
        let span = tracer.startSpan("child", context: context, ofKind: .client, at: DefaultTracerClock.now)
        #expect(!span.isRecording)
        #expect(span.context.traceContext == parent, "the child's context is the parent's, not a new span id")
        span.attributes["rpc.method"] = "x"
        #expect(span.attributes.isEmpty)
        span.end()
        #expect(sink.all.isEmpty)
        // A sampled parent still gets a child of its own.
        var sampled = InstrumentationContext.topLevel
        sampled.traceContext = try #require(
            HeraldTracing.parse(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate: nil)
        )
        let child = tracer.startSpan("child", context: sampled, ofKind: .client, at: DefaultTracerClock.now)
        #expect(child.isRecording && child.context.traceContext?.spanID != parent.spanID)
        child.end()
        #expect(sink.all.count == 1)
    }

    @Test("OTEL_* settings: off unless asked, the spec's defaults, and a clear error for what Herald cannot do")
    func configuration() throws {
        #expect(try TracingConfiguration(environment: [:], defaultServiceName: "herald-x") == nil)
        #expect(
            try TracingConfiguration(
                environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_SDK_DISABLED": "true"],
                defaultServiceName: "x") == nil)
        #expect(
            try TracingConfiguration(
                environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"],
                defaultServiceName: "x") == nil)
        let defaults = try #require(
            try TracingConfiguration(environment: ["OTEL_TRACES_EXPORTER": "otlp"], defaultServiceName: "herald-x"))
        #expect(defaults.host == "localhost" && defaults.port == 4317 && !defaults.useTLS)
        #expect(defaults.serviceName == "herald-x" && defaults.sampler == .always && defaults.parentBased)
        #expect(defaults.scheduleDelay == .milliseconds(5000) && defaults.maxQueueSize == 2048)
        let set = try #require(
            try TracingConfiguration(
                environment: [
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.example:4318",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:1",
                    "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b, x=1",
                    "OTEL_SERVICE_NAME": "edge-eu", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod",
                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
                ], defaultServiceName: "herald-edge"))
        #expect(set.host == "collector.example" && set.port == 4318 && set.useTLS)
        #expect(set.headers == ["api-key": "a b", "x": "1"])
        #expect(set.resourceAttributes.map(\.0) == ["service.name", "deployment.environment"])
        #expect(set.resourceAttributes.first?.1 == "edge-eu")
        #expect(set.sampler == .ratio(0.25) && set.parentBased)
        for bad in [
            ["OTEL_TRACES_EXPORTER": "zipkin"],
            ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"],
            ["OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"],
            ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:99999"],
            ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:\(Int64.max)"],
            ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_BSP_MAX_QUEUE_SIZE": "\(Int64.min)"],
            ["OTEL_TRACES_EXPORTER": "otlp", "OTEL_BSP_SCHEDULE_DELAY": "-5"],
            ["OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "sometimes"],
        ] {
            #expect(throws: ConfigError.self, "\(bad)") {
                try TracingConfiguration(environment: bad, defaultServiceName: "x")
            }
        }
    }

    @Test("the OTLP encoding: a span's ids, times, kind and attributes at OTLP's field numbers")
    func encoding() {
        let (tracer, collected) = Self.tracer()
        let span = tracer.startSpan(
            "push", context: .topLevel, ofKind: .client, at: DefaultTracerClock.Instant(nanosecondsSinceEpoch: 1000))
        span.attributes["s"] = "v"
        span.attributes["i"] = 300
        span.end(at: DefaultTracerClock.Instant(nanosecondsSinceEpoch: 2000))
        let finished = collected.all[0]
        var writer = ProtoWriter()
        OTLPTraceEncoding.encode(finished, into: &writer)
        let bytes = writer.bytes
        // trace_id: field 1, length 16, then the id's bytes.
        #expect(Array(bytes.prefix(2)) == [0x0A, 16])
        #expect(Array(bytes[2..<18]) == OTLPTraceEncoding.bytes(finished.trace.traceID))
        #expect(Array(bytes[18..<20]) == [0x12, 8])  // span_id
        // kind = 3 (client), start 1000 as fixed64 (field 7, wire type 1).
        #expect(bytes.contains(subsequence: [0x30, 3]))
        #expect(bytes.contains(subsequence: [0x39, 0xE8, 0x03, 0, 0, 0, 0, 0, 0]))
        // The int attribute 300 as a varint (AnyValue.int_value = 3).
        #expect(bytes.contains(subsequence: [0x18, 0xAC, 0x02]))
    }
}

@Suite("tracing: the protobuf writer", .watchedForStalls)
struct ProtoWriterTests {
    @Test("a nested message's length is a varint in front of it, one byte or more, nested or not")
    func nestedLengths() {
        for size in [0, 1, 127, 128, 300, 16_384] {
            var writer = ProtoWriter()
            writer.message(2) { outer in
                outer.message(1) { inner in inner.stringValue(1, String(repeating: "a", count: size)) }
            }
            // Hand-written: field 1 (string) in field 1 (message) in field 2 (message).
            func varint(_ value: Int) -> [UInt8] {
                var value = value
                var out: [UInt8] = []
                while value >= 0x80 {
                    out.append(UInt8(value & 0x7F) | 0x80)
                    value >>= 7
                }
                return out + [UInt8(value)]
            }
            let string = [0x0A] + varint(size) + Array(repeating: UInt8(ascii: "a"), count: size)
            let inner = [0x0A] + varint(string.count) + string
            #expect(writer.bytes == [0x12] + varint(inner.count) + inner, "\(size)")
        }
    }
}

extension Array where Element == UInt8 {
    func contains(subsequence: [UInt8]) -> Bool {
        guard subsequence.count <= count else { return false }
        return (0...(count - subsequence.count)).contains { Array(self[$0..<($0 + subsequence.count)]) == subsequence }
    }
}

/// A call entering a process (``HeraldTracer/entering(traceparent:tracestate:in:)``): the one
/// sampling decision, and a trace passed on unsampled without a span.
@Suite("tracing: calls entering a process", .watchedForStalls)
struct EnteringTests {
    static func passedOn(_ entering: HeraldTracer.Entering) -> PassedOnTrace? {
        if case .passOn(let trace) = entering { return trace }
        return nil
    }

    static func recorded(_ entering: HeraldTracer.Entering) -> InstrumentationContext? {
        if case .record(let context) = entering { return context }
        return nil
    }

    @Test("a caller's unsampled trace goes on as it arrived: no span, the same traceparent and tracestate")
    func unsampledCaller() async throws {
        let (tracer, sink) = TracerTests.tracer(.always)
        let arrived = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        let passed = try #require(
            Self.passedOn(tracer.entering(traceparent: arrived, tracestate: "v=1", in: .topLevel)))
        #expect(passed == PassedOnTrace(traceparent: arrived, tracestate: "v=1"))
        #expect(passed.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(sink.all.isEmpty)
    }

    @Test("a new trace is decided once: the span started under the decision takes its trace id, or none is recorded")
    func newTraces() throws {
        let (tracer, sink) = TracerTests.tracer(.ratio(0.5))
        var recorded = 0
        for _ in 0..<200 {
            let entering = tracer.entering(traceparent: nil, tracestate: nil, in: .topLevel)
            if let context = Self.recorded(entering) {
                recorded += 1
                let span = tracer.startSpan("edge", context: context, ofKind: .server, at: DefaultTracerClock.now)
                #expect(span.isRecording)
                #expect(context.traceContext == nil && span.identity.traceID == context[DecidedRootKey.self])
                #expect(span.context[DecidedRootKey.self] == nil, "the decided id is used once")
                #expect(TraceSampler.ratio(0.5).samples(span.identity.traceID))
                span.end()
            } else {
                let passed = try #require(Self.passedOn(entering))
                let root = try #require(HeraldTracing.parse(traceparent: passed.traceparent, tracestate: nil))
                #expect(!root.flags.contains(.sampled) && !TraceSampler.ratio(0.5).samples(root.traceID))
            }
        }
        #expect(sink.all.count == recorded)
        #expect((50...150).contains(recorded), "\(recorded) of 200 at 0.5")
    }

    @Test("a sampled caller's trace is recorded; a sampler that is not parent-based leaves the decision to the span")
    func sampledCaller() throws {
        let sampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        let context = try #require(
            Self.recorded(TracerTests.tracer(.never).0.entering(traceparent: sampled, tracestate: nil, in: .topLevel)))
        #expect(context.traceContext?.spanID.description == "00f067aa0ba902b7")
        let (own, sink) = TracerTests.tracer(.never, parentBased: false)
        let declined = try #require(Self.recorded(own.entering(traceparent: sampled, tracestate: nil, in: .topLevel)))
        let span = own.startSpan("s", context: declined, ofKind: .server, at: DefaultTracerClock.now)
        #expect(!span.isRecording && span.context.traceContext?.flags.contains(.sampled) == false)
        #expect(span.context.traceContext?.traceID == context.traceContext?.traceID)
        span.end()
        #expect(sink.all.isEmpty)
    }

    @Test("the sampled flag read in place agrees with W3CTraceContext, junk included")
    func sampledFlagInPlace() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736"
        let span = "00f067aa0ba902b7"
        var texts = ["00", "01", "02", "03", "ff", "0g", "1-"].map { "00-\(id)-\(span)-\($0)" }
        texts += [
            "", "00-\(id)-\(span)", "01-\(id)-\(span)-00", "00-\(id.uppercased())-\(span)-00",
            "00-\(String(repeating: "0", count: 32))-\(span)-00", "00-\(id)-0000000000000000-00",
            "00_\(id)-\(span)-00", "00-\(id)-\(span)-00-", String(repeating: "0", count: 55),
            "00-\(id.dropLast())é-\(span)-00",
        ]
        for _ in 0..<50 {
            let flags: TraceFlags = Bool.random() ? .sampled : []
            texts.append(
                TraceContext(traceID: .random(), spanID: .random(), flags: flags, state: TraceState())
                    .traceParentHeaderValue)
        }
        for text in texts {
            let w3c = HeraldTracing.parse(traceparent: text, tracestate: nil)
            #expect(HeraldTracing.sampledFlag(of: text) == w3c.map { $0.flags.contains(.sampled) }, "\(text)")
        }
    }

    @Test("trace and span ids from the fast generator: distinct, never zero, evenly split by the ratio sampler")
    func ids() {
        var generator = FastRandom()
        var seen = Set<TraceID>()
        var sampled = 0
        for _ in 0..<10_000 {
            let id = TraceID.random(using: &generator)
            seen.insert(id)
            if TraceSampler.ratio(0.25).samples(id) { sampled += 1 }
            #expect(SpanID.random(using: &generator) != SpanID(bytes: (0, 0, 0, 0, 0, 0, 0, 0)))
        }
        #expect(seen.count == 10_000)
        #expect((2_200...2_800).contains(sampled), "\(sampled) of 10,000 at 0.25")
        let hex = generator.hex()
        #expect(hex.utf8.count == 16 && hex.utf8.allSatisfy { "0123456789abcdef".utf8.contains($0) }, "\(hex)")
        #expect(Set((0..<1000).map { _ in newRequestID() }).count == 1000)
    }

    @Test("traceparent written byte by byte reads as W3CTraceContext writes it")
    func traceparentText() {
        for flags: TraceFlags in [[], .sampled] {
            for _ in 0..<50 {
                let trace = TraceContext(traceID: .random(), spanID: .random(), flags: flags, state: TraceState())
                #expect(HeraldTracing.traceparent(trace) == trace.traceParentHeaderValue)
            }
        }
    }
}
