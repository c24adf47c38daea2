import HeraldModel
import HeraldTestSupport
import Testing
import Tracing
import W3CTraceContext

@testable import HeraldTelemetry

/// What HeraldTelemetry reads from outside, byte by byte: a caller's `traceparent` (any HTTP or
/// RPC client sends one) and the sampler's decision, against W3CTraceContext's reading of the same
/// header. The fast paths (`sampledFlag(of:)`, `traceparent(_:)`) replace W3CTraceContext's on the
/// hot path, so they must agree with it on every input, not only on well-formed ones.
@Suite("trace context", .watchedForStalls)
struct TraceContextTests {
    static let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    /// What W3CTraceContext makes of a header: nil when it refuses it, else its sampled flag.
    static func w3cSampled(_ header: String) -> Bool? {
        (try? TraceContext(traceParentHeaderValue: header)).map { $0.flags.contains(.sampled) }
    }

    /// `valid` with one to three bytes changed, cut or grown: the near misses a fast parser gets wrong.
    static func mutations(count: Int) -> [String] {
        var random = SeededGenerator(state: 51)
        let alphabet = Array("0123456789abcdefABCDEF-xz \u{0}é".unicodeScalars)
        var out: [String] = []
        for _ in 0..<count {
            var scalars = Array(valid.unicodeScalars)
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                switch Int.random(in: 0..<10, using: &random) {
                case 0: scalars.remove(at: Int.random(in: 0..<scalars.count, using: &random))
                case 1:
                    scalars.insert(
                        alphabet.randomElement(using: &random)!, at: Int.random(in: 0...scalars.count, using: &random))
                default:
                    scalars[Int.random(in: 0..<scalars.count, using: &random)] = alphabet.randomElement(using: &random)!
                }
            }
            var text = String.UnicodeScalarView()
            text.append(contentsOf: scalars)
            out.append(String(text))
        }
        return out
    }

    @Test("the in-place sampled flag agrees with W3CTraceContext on 20,000 near misses and on every flags byte")
    func sampledFlagAgrees() async {
        var disagreements: [String] = []
        for (index, header) in Self.mutations(count: 20_000).enumerated() {
            if index % 1000 == 0 { await Task.yield() }
            let fast = HeraldTracing.sampledFlag(of: header)
            // The fast path reads version 00 only; another version falls back to W3CTraceContext.
            let expected = header.hasPrefix("00") ? Self.w3cSampled(header) : nil
            if fast != expected {
                disagreements.append("\(header.debugDescription): \(fast as Any) vs \(expected as Any)")
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.count) disagree, first \(disagreements.prefix(3))")
        for flags in 0...255 {
            let hex = String(flags, radix: 16)
            let header = String(Self.valid.dropLast(2)) + (flags < 16 ? "0" + hex : hex)
            #expect(HeraldTracing.sampledFlag(of: header) == (flags & 1 == 1), "\(header)")
            #expect(Self.w3cSampled(header) == (flags & 1 == 1), "\(header)")
        }
    }

    @Test("all-zero ids, upper-case hex and the wrong length are not a trace, whichever reader looks")
    func refused() {
        for header in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", String(Self.valid.dropLast()), "",
        ] {
            #expect(HeraldTracing.sampledFlag(of: header) == nil, "\(header)")
            #expect(HeraldTracing.parse(traceparent: header, tracestate: nil) == nil, "\(header)")
        }
    }

    @Test("a context written byte by byte is what W3CTraceContext writes, for random ids and every flags byte")
    func written() throws {
        var random = SeededGenerator(state: 7)
        for flags in 0...255 {
            let trace = TraceContext(
                traceID: TraceID.random(using: &random), spanID: SpanID.random(using: &random),
                flags: TraceFlags(rawValue: UInt8(flags)), state: TraceState())
            let header = HeraldTracing.traceparent(trace)
            #expect(header == trace.traceParentHeaderValue)
            let back = try #require(HeraldTracing.parse(traceparent: header, tracestate: nil))
            #expect(back.traceID == trace.traceID && back.spanID == trace.spanID && back.flags == trace.flags)
        }
    }

    @Test("tracestate rides along when W3C's 512 bytes or less and valid; otherwise the trace is kept without it")
    func tracestate() throws {
        let kept = try #require(HeraldTracing.parse(traceparent: Self.valid, tracestate: "v=1,w=2"))
        // Written again as W3CTraceContext writes a list (", " between members).
        #expect(kept.traceStateHeaderValue == "v=1, w=2")
        for state in [String(repeating: "a=b,", count: 200), "not a state"] {
            let trace = try #require(HeraldTracing.parse(traceparent: Self.valid, tracestate: state))
            #expect(trace.traceID.description == "4bf92f3577b34da6a3ce929d0e0e4736")
            #expect(trace.traceStateHeaderValue == nil || trace.traceStateHeaderValue == "")
        }
        // A stored traceparent (an outbox send's) becomes a context to start later spans in.
        let context = try #require(HeraldTracing.context(traceparent: Self.valid))
        #expect(context.traceContext?.spanID.description == "00f067aa0ba902b7")
        #expect(HeraldTracing.context(traceparent: "junk") == nil)
    }

    @Test(
        "a ratio sampler takes about its share of random traces, and a trace taken at one ratio is taken at every higher one"
    )
    func ratios() {
        var random = SeededGenerator(state: 3)
        let ids = (0..<10_000).map { _ in TraceID.random(using: &random) }
        var previous = Set<Int>()
        for ratio in [0.0, 0.01, 0.1, 0.25, 0.5, 0.9, 0.999, 1.0, 2.0] {
            let taken = Set(ids.indices.filter { TraceSampler.ratio(ratio).samples(ids[$0]) })
            let expected = min(ratio, 1) * Double(ids.count)
            // Binomial: within 5 standard deviations (and exactly 0 or all at the ends).
            let spread = 5 * (expected * (1 - min(ratio, 1))).squareRoot()
            #expect(abs(Double(taken.count) - expected) <= spread, "\(ratio): \(taken.count)")
            #expect(previous.isSubset(of: taken), "\(ratio) drops a trace a lower ratio took")
            previous = taken
        }
        #expect(ids.allSatisfy { TraceSampler.always.samples($0) && !TraceSampler.never.samples($0) })
    }

    @Test("OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1 for the ratio samplers, anything else is an error, not 100%")
    func samplerArgument() throws {
        func sampler(_ name: String, _ argument: String?) throws -> TraceSampler? {
            var environment = ["OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": name]
            environment["OTEL_TRACES_SAMPLER_ARG"] = argument
            return try TracingConfiguration(environment: environment, defaultServiceName: "x")?.sampler
        }
        #expect(try sampler("traceidratio", "0.01") == .ratio(0.01))
        #expect(try sampler("parentbased_traceidratio", " 1 ") == .ratio(1))
        #expect(try sampler("parentbased_traceidratio", "0") == .ratio(0))
        // The specification's default when no argument is given.
        #expect(try sampler("traceidratio", nil) == .ratio(1))
        // Other samplers take no argument and ignore one.
        #expect(try sampler("always_on", "junk") == .always)
        for bad in ["abc", "1.5", "-0.1", "nan", "inf", "0,5", "1e400"] {
            #expect(throws: ConfigError.self, "\(bad)") { try sampler("parentbased_traceidratio", bad) }
        }
    }

    @Test("OTLP headers and resource attributes: key=value pairs, percent-decoded, blanks and keyless items skipped")
    func pairs() {
        #expect(
            TracingConfiguration.pairs(" api-key = a%20b ,=x,novalue, trailing=%zz,empty=,k=v=w")
                == ["api-key": "a b", "trailing": "%zz", "empty": "", "k": "v=w"])
        #expect(TracingConfiguration.pairs(nil).isEmpty && TracingConfiguration.pairs(",,,").isEmpty)
    }
}
