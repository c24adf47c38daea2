import HeraldModel
import Synchronization
public import Tracing
public import W3CTraceContext

/// W3C trace context, in the metadata of both transports (docs/rpc-protocol.md).
package let traceParentKey = "traceparent"
package let traceStateKey = "tracestate"

/// The W3C trace context of the span a task is in: carried in `InstrumentationContext` so that
/// every RPC, log line and span started below it joins the same trace.
enum TraceContextKey: InstrumentationContextKey {
    typealias Value = TraceContext
    static let nameOverride: String? = "traceparent"
}

/// The span object itself, for code that adds to the current span (``HeraldTracing/annotate(_:)``).
enum ActiveSpanKey: InstrumentationContextKey {
    typealias Value = HeraldSpan
}

/// A trace this process passes on without recording it (not sampled, parent-based sampling): its
/// `traceparent` and `tracestate` as they arrived, or as written once for a new root. It lives in a
/// task-local of its own (``HeraldTracing/passedOn``), not in `InstrumentationContext`: a request
/// whose trace is not sampled then costs no context dictionary, span object, lock or attribute,
/// and each RPC below sends the texts as they are (``HeraldTracing/currentHeaders``).
///
/// A class: the task-local's getter, which the concurrency library runs unspecialised, copies one
/// reference instead of two strings through the type's value witnesses.
public final class PassedOnTrace: Sendable, Equatable {
    public let traceparent: String
    public let tracestate: String?

    public init(traceparent: String, tracestate: String?) {
        self.traceparent = traceparent
        self.tracestate = tracestate
    }

    public static func == (a: PassedOnTrace, b: PassedOnTrace) -> Bool {
        a.traceparent == b.traceparent && a.tracestate == b.tracestate
    }

    /// The trace id's 32 hex digits (for log lines).
    public var traceID: Substring { traceparent.dropFirst(3).prefix(32) }
}

/// A new trace's id, drawn and decided (sampled) before its first span is started by code that
/// does not know about it (Hummingbird's `TracingMiddleware`): that span takes this id, so its
/// decision is the one already taken (``HeraldTracer/entering(traceparent:tracestate:in:)``).
enum DecidedRootKey: InstrumentationContextKey {
    typealias Value = TraceID
}

extension InstrumentationContext {
    /// The trace and span this context is in, if any.
    public var traceContext: TraceContext? {
        get { self[TraceContextKey.self] }
        set { self[TraceContextKey.self] = newValue }
    }
}

/// Which new traces are recorded (`OTEL_TRACES_SAMPLER`). A span with a parent follows its
/// parent's sampled flag in the `parentbased_*` samplers (the default), so a trace is whole or absent.
public enum TraceSampler: Sendable, Equatable {
    case always
    case never
    /// A trace id's lower 8 bytes, read as a number, below `ratio × 2⁶⁴`: every service takes the
    /// same decision for the same trace without asking each other.
    case ratio(Double)

    func samples(_ traceID: TraceID) -> Bool {
        switch self {
        case .always: return true
        case .never: return false
        case .ratio(let ratio):
            guard ratio < 1 else { return true }
            guard ratio > 0 else { return false }
            // The trace id's bytes 8…15 as a big-endian number (W3C's "random" part).
            let low = withUnsafeBytes(of: traceID.bytes) {
                UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            }
            return Double(low) < ratio * 18_446_744_073_709_551_616.0
        }
    }
}

/// Herald's tracer: W3C trace context in and out, spans handed to an exporter when they end.
///
/// Hummingbird's `TracingMiddleware` and Herald's own RPC layer start spans through the
/// swift-distributed-tracing API (`InstrumentationSystem`), so either side of a call can be a
/// different Tracer implementation and still join the trace: the only contract is `traceparent`.
public final class HeraldTracer: Tracer, Sendable {
    public typealias Span = HeraldSpan

    /// `service.name` and the other resource attributes of every span.
    public let resource: [(String, String)]
    let sampler: TraceSampler
    let parentBased: Bool
    let sink: @Sendable (FinishedSpan) -> Void

    /// `sink` receives each recorded span once it ends (the exporter's queue, or a test's list).
    public init(
        resource: [(String, String)], sampler: TraceSampler = .always, parentBased: Bool = true,
        sink: @escaping @Sendable (FinishedSpan) -> Void
    ) {
        self.resource = resource
        self.sampler = sampler
        self.parentBased = parentBased
        self.sink = sink
    }

    public func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> InstrumentationContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> HeraldSpan {
        var context = context()
        let parent = context.traceContext
        let decidedRoot = context[DecidedRootKey.self]
        if decidedRoot != nil { context[DecidedRootKey.self] = nil }
        // A span under a parent that was not sampled records nothing and names nothing: it passes
        // the parent's context on as it arrived (no span id drawn, no context rebuilt), as OTel's
        // non-recording spans do. Only a trace's first span draws ids and takes the decision.
        if let parent, parentBased, !parent.flags.contains(.sampled) {
            return HeraldSpan(
                name: operationName, context: context, identity: parent, parent: parent.spanID, kind: kind, start: 0,
                recording: false, sink: sink)
        }
        var ids = FastRandom()
        let traceID = parent?.traceID ?? decidedRoot ?? TraceID.random(using: &ids)
        let sampled =
            if let parent, parentBased {
                parent.flags.contains(.sampled)
            } else {
                (parent == nil && decidedRoot != nil) || sampler.samples(traceID)
            }
        let own = TraceContext(
            traceID: traceID, spanID: SpanID.random(using: &ids), flags: sampled ? .sampled : [],
            state: parent?.state ?? TraceState())
        context.traceContext = own
        guard sampled else {
            return HeraldSpan(
                name: operationName, context: context, identity: own, parent: parent?.spanID, kind: kind, start: 0,
                recording: false, sink: sink)
        }
        let span = HeraldSpan(
            name: operationName, context: context, identity: own, parent: parent?.spanID, kind: kind,
            start: instant().nanosecondsSinceEpoch, recording: true, sink: sink)
        context[ActiveSpanKey.self] = span
        span.setContext(context)
        return span
    }

    /// How a call entering this process (an HTTP request, an RPC) is traced.
    public enum Entering: Sendable {
        /// Spans are recorded: start the call's span in this context (a sampled caller's trace
        /// context, or a new trace's id already decided for the span to take).
        case record(InstrumentationContext)
        /// The trace is not sampled: no span; run the call with ``HeraldTracing/passedOn`` bound
        /// to this, so what it calls joins the same unsampled trace instead of starting its own.
        case passOn(PassedOnTrace)
    }

    /// The one sampling decision for a call entering this process, taken before any span exists.
    /// With a parent-based sampler (the default) a trace that is not sampled, the caller's or a new
    /// one the sampler declines, is passed on and costs next to nothing, as OTel's non-recording
    /// spans do. With a sampler that is not parent-based, every call takes the span path and
    /// ``startSpan(_:context:ofKind:at:function:file:line:)`` decides.
    public func entering(traceparent: String?, tracestate: String?, in base: InstrumentationContext) -> Entering {
        // The common case first, without building a TraceContext: an unsampled caller's trace.
        if parentBased, tracestate == nil, let traceparent, HeraldTracing.sampledFlag(of: traceparent) == false {
            return .passOn(PassedOnTrace(traceparent: traceparent, tracestate: nil))
        }
        var context = base
        let parent = traceparent.flatMap { HeraldTracing.parse(traceparent: $0, tracestate: tracestate) }
        guard parentBased else {
            if let parent { context.traceContext = parent }
            return .record(context)
        }
        if let traceparent, let parent {
            guard parent.flags.contains(.sampled) else {
                return .passOn(
                    PassedOnTrace(traceparent: traceparent, tracestate: parent.state.isEmpty ? nil : tracestate))
            }
            context.traceContext = parent
            return .record(context)
        }
        var ids = FastRandom()
        let traceID = TraceID.random(using: &ids)
        guard sampler.samples(traceID) else {
            let root = TraceContext(
                traceID: traceID, spanID: SpanID.random(using: &ids), flags: [], state: TraceState())
            return .passOn(PassedOnTrace(traceparent: HeraldTracing.traceparent(root), tracestate: nil))
        }
        context[DecidedRootKey.self] = traceID
        return .record(context)
    }

    public func activeSpan(identifiedBy context: InstrumentationContext) -> HeraldSpan? {
        context[ActiveSpanKey.self]
    }

    public func forceFlush() {}

    public func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier, into context: inout InstrumentationContext, using extractor: Extract
    ) where Extract.Carrier == Carrier {
        guard let parent = extractor.extract(key: traceParentKey, from: carrier),
            let trace = HeraldTracing.parse(
                traceparent: parent, tracestate: extractor.extract(key: traceStateKey, from: carrier))
        else { return }
        context.traceContext = trace
    }

    public func inject<Carrier, Inject: Injector>(
        _ context: InstrumentationContext, into carrier: inout Carrier, using injector: Inject
    ) where Inject.Carrier == Carrier {
        guard let trace = context.traceContext else { return }
        injector.inject(HeraldTracing.traceparent(trace), forKey: traceParentKey, into: &carrier)
        if let state = trace.traceStateHeaderValue { injector.inject(state, forKey: traceStateKey, into: &carrier) }
    }
}

/// A span as the exporter sees it once it has ended.
public struct FinishedSpan: Sendable {
    public var name: String
    public var trace: TraceContext
    public var parentSpanID: SpanID?
    public var kind: SpanKind
    public var startNanos: UInt64
    public var endNanos: UInt64
    public var attributes: AttributeList
    public var status: SpanStatus?
    public var events: [SpanEvent]
    public var links: [(trace: TraceContext, attributes: SpanAttributes)]
}

/// One span of ``HeraldTracer``. Mutations are locked: a span may be touched from several tasks
/// (a route's handler and the response writer that ends it).
public final class HeraldSpan: Tracing.Span, Sendable {
    private struct State {
        var name: String
        var context: InstrumentationContext
        var attributes = AttributeList()
        var status: SpanStatus?
        var events: [SpanEvent] = []
        var links: [(trace: TraceContext, attributes: SpanAttributes)] = []
        var ended = false
    }

    public let identity: TraceContext
    let parent: SpanID?
    let kind: SpanKind
    let start: UInt64
    public let isRecording: Bool
    private let sink: @Sendable (FinishedSpan) -> Void
    private let state: Mutex<State>

    init(
        name: String, context: InstrumentationContext, identity: TraceContext, parent: SpanID?, kind: SpanKind,
        start: UInt64, recording: Bool, sink: @escaping @Sendable (FinishedSpan) -> Void
    ) {
        self.identity = identity
        self.parent = parent
        self.kind = kind
        self.start = start
        self.isRecording = recording
        self.sink = sink
        state = Mutex(State(name: name, context: context))
    }

    fileprivate func setContext(_ context: InstrumentationContext) { state.withLock { $0.context = context } }

    public var context: InstrumentationContext { state.withLock { $0.context } }

    public var operationName: String {
        get { state.withLock { $0.name } }
        set { state.withLock { $0.name = newValue } }
    }

    public var attributes: SpanAttributes {
        // A span that records nothing has none: no lock, no copy (Hummingbird's middleware sets a
        // few on every request's span).
        get { isRecording ? state.withLock { $0.attributes.spanAttributes } : SpanAttributes() }
        set {
            guard isRecording else { return }
            let list = AttributeList(newValue)
            state.withLock { $0.attributes = list }
        }
    }

    /// Sets one attribute in place, under the span's lock. `attributes[key] = value` through the
    /// `Span` protocol reads the whole set, copies it, and writes it back.
    public func setAttribute(_ key: String, _ value: (some SpanAttributeConvertible)?) {
        guard isRecording else { return }
        let attribute = value?.toSpanAttribute()
        state.withLock { $0.attributes.set(key, attribute) }
    }

    /// Sets one text attribute in place: what most of Herald's are, without the generic conversion.
    public func setAttribute(_ key: String, _ value: String) {
        guard isRecording else { return }
        state.withLock { $0.attributes.set(key, .string(value)) }
    }

    /// Changes several attributes in place, under the span's lock (nothing when it does not record).
    public func updateInPlace(_ update: (inout AttributeList) -> Void) {
        guard isRecording else { return }
        state.withLock { update(&$0.attributes) }
    }

    public func setStatus(_ status: SpanStatus) {
        guard isRecording else { return }
        state.withLock { $0.status = status }
    }

    public func addEvent(_ event: SpanEvent) {
        guard isRecording else { return }
        state.withLock { if $0.events.count < 32 { $0.events.append(event) } }
    }

    public func recordError<Instant: TracerInstant>(
        _ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant
    ) {
        guard isRecording else { return }
        var attributes = attributes
        attributes["exception.type"] = "\(type(of: error))"
        attributes["exception.message"] = "\(error)"
        addEvent(SpanEvent(name: "exception", at: instant(), attributes: attributes))
    }

    public func addLink(_ link: SpanLink) {
        guard isRecording, let trace = link.context.traceContext else { return }
        state.withLock { if $0.links.count < 128 { $0.links.append((trace, link.attributes)) } }
    }

    public func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        // Nothing to hand over, and no ActiveSpanKey was set in its context.
        guard isRecording else { return }
        let finished = state.withLock { state -> FinishedSpan? in
            guard !state.ended else { return nil }
            state.ended = true
            // The context holds this span (ActiveSpanKey): dropped here so the two do not keep each other.
            state.context[ActiveSpanKey.self] = nil
            guard isRecording else { return nil }
            return FinishedSpan(
                name: state.name, trace: identity, parentSpanID: parent, kind: kind, startNanos: start,
                endNanos: instant().nanosecondsSinceEpoch, attributes: state.attributes, status: state.status,
                events: state.events, links: state.links)
        }
        if let finished { sink(finished) }
    }
}

/// Process-wide tracing: off (the default) until ``HeraldTracing/install(_:)`` in `main`.
public enum HeraldTracing {
    /// The installed tracer; nil when tracing is off. Written once, by `main` before any task
    /// starts (like `InstrumentationSystem.bootstrap` itself), read without a lock after.
    nonisolated(unsafe) public private(set) static var tracer: HeraldTracer?

    /// True when spans are recorded: the one check the hot paths make when tracing is off.
    @inlinable public static var isOn: Bool { tracer != nil }

    /// Whether this process calls other services (``install(_:callsOut:)``). When it does not
    /// (auth, registration and payload have no peers), a call whose trace is passed on unsampled
    /// runs without ``passedOn`` bound: no RPC below it would send the trace on, and the binding
    /// (an unspecialised `TaskLocal.withValue` and its task switches) was most of what tracing
    /// cost such a call. Its log lines written through `RPCContext.logger` still carry `trace_id`,
    /// and its internal spans (``span(_:ofKind:context:_:)``), which never start a trace, see none
    /// and record nothing, as in the trace passed on.
    nonisolated(unsafe) public private(set) static var callsOut = true

    /// Makes `tracer` the process's tracer (and swift-distributed-tracing's, so Hummingbird's
    /// middleware uses it). Call once, before any task starts. `callsOut`: false in a process
    /// that makes no RPC (``callsOut``).
    public static func install(_ tracer: HeraldTracer, callsOut: Bool = true) {
        Self.tracer = tracer
        Self.callsOut = callsOut
        InstrumentationSystem.bootstrap(tracer)
    }

    /// A `traceparent` (and `tracestate`) as a trace context; nil when malformed (a bad header
    /// starts a new trace rather than failing a request). Bounded: W3C's lengths only.
    public static func parse(traceparent: String, tracestate: String?) -> TraceContext? {
        guard traceparent.utf8.count == 55 else { return nil }
        let state = tracestate.flatMap { $0.utf8.count <= 512 ? $0 : nil }
        return (try? TraceContext(traceParentHeaderValue: traceparent, traceStateHeaderValue: state))
            ?? (try? TraceContext(traceParentHeaderValue: traceparent))
    }

    /// The trace the current task passes on without recording (``HeraldTracer/Entering/passOn(_:)``).
    @TaskLocal public static var passedOn: PassedOnTrace?

    /// The current task's trace as `traceparent`/`tracestate` values, for RPC metadata: a trace
    /// passed on goes on as it arrived.
    public static var currentHeaders: PassedOnTrace? {
        guard isOn else { return nil }
        if let passed = passedOn { return passed }
        return InstrumentationContext.current?.traceContext.map(headers(of:))
    }

    /// `trace` as the `traceparent`/`tracestate` values an RPC sends.
    public static func headers(of trace: TraceContext) -> PassedOnTrace {
        PassedOnTrace(traceparent: traceparent(trace), tracestate: trace.traceStateHeaderValue)
    }

    /// The current task's `traceparent` when its trace is sampled (what later work on its behalf,
    /// such as an outbox send's deliveries, records spans under), else nil.
    public static var currentSampledTraceParent: String? {
        guard isOn, passedOn == nil, let trace = InstrumentationContext.current?.traceContext,
            trace.flags.contains(.sampled)
        else { return nil }
        return traceparent(trace)
    }

    /// True when a span started now, in `context` (the task's own when nil), would record nothing:
    /// the task passes its trace on, or the context's trace is not sampled (parent-based). Callers
    /// skip starting one.
    public static func passesOn(_ context: InstrumentationContext? = nil) -> Bool {
        guard let tracer, tracer.parentBased else { return false }
        if context == nil, passedOn != nil { return true }
        guard let trace = (context ?? InstrumentationContext.current)?.traceContext else { return false }
        return !trace.flags.contains(.sampled)
    }

    /// Runs a call entering this process as `entering` says: `span`, given the context to start the
    /// call's span in, when recorded; else `body` with its trace passed on and no span.
    ///
    /// `nonisolated(nonsending)`, as its closures: it runs on its caller's executor, so the frames it
    /// adds cost no executor hops (task switches) on a call's path.
    @inlinable nonisolated(nonsending) public static func run<T>(
        _ entering: HeraldTracer.Entering, span: nonisolated(nonsending) (InstrumentationContext) async throws -> T,
        passOn body: nonisolated(nonsending) () async throws -> T
    ) async throws -> T {
        switch entering {
        case .record(let context): return try await span(context)
        case .passOn(let trace): return try await $passedOn.withValue(trace) { try await body() }
        }
    }

    /// Whether a version-00 `traceparent` is sampled, read in place; nil when it is not one
    /// W3CTraceContext would read (length, dashes, lowercase hex, ids not all zero). ~10× cheaper
    /// than building the TraceContext, which the trace passed on does not need.
    static func sampledFlag(of traceparent: String) -> Bool? {
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte &- UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte &- UInt8(ascii: "a") &+ 10
            default: nil
            }
        }
        let read = traceparent.utf8.withContiguousStorageIfAvailable { text -> Bool? in
            guard text.count == 55, text[0] == UInt8(ascii: "0"), text[1] == UInt8(ascii: "0") else { return nil }
            guard text[2] == UInt8(ascii: "-"), text[35] == UInt8(ascii: "-"), text[52] == UInt8(ascii: "-") else {
                return nil
            }
            var traceBits: UInt8 = 0
            var spanBits: UInt8 = 0
            for at in 3..<35 {
                guard let digit = hex(text[at]) else { return nil }
                traceBits |= digit
            }
            for at in 36..<52 {
                guard let digit = hex(text[at]) else { return nil }
                spanBits |= digit
            }
            guard traceBits != 0, spanBits != 0, hex(text[53]) != nil, let low = hex(text[54]) else { return nil }
            return low & 1 == 1
        }
        return read ?? nil
    }

    /// `trace` as a `traceparent` value (`00-<trace id>-<span id>-<flags>`), written byte by byte:
    /// W3CTraceContext's `traceParentHeaderValue` goes through string interpolation, ~6k
    /// instructions a call.
    static func traceparent(_ trace: TraceContext) -> String {
        // The ids as big-endian numbers, their hex digits written from the last: no closure
        // captures a variable (that cost a dynamic exclusivity check per byte).
        let high = withUnsafeBytes(of: trace.traceID.bytes) { UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)) }
        let low = withUnsafeBytes(of: trace.traceID.bytes) {
            UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        }
        let span = withUnsafeBytes(of: trace.spanID.bytes) { UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)) }
        return String(unsafeUninitializedCapacity: 55) { out in
            writeLowerHex(0, digits: 2, to: out, at: 0)
            out[2] = UInt8(ascii: "-")
            writeLowerHex(high, digits: 16, to: out, at: 3)
            writeLowerHex(low, digits: 16, to: out, at: 19)
            out[35] = UInt8(ascii: "-")
            writeLowerHex(span, digits: 16, to: out, at: 36)
            out[52] = UInt8(ascii: "-")
            writeLowerHex(UInt64(trace.flags.rawValue), digits: 2, to: out, at: 53)
            return 55
        }
    }

    /// Runs `body` in a span when tracing is on and the task (or `context`) is in a trace that
    /// records; the span is nil otherwise. Such a span is part of the work of a call, so it never
    /// starts a trace of its own: with no trace around it (a call whose trace is passed on in a
    /// process that is not bound to it, ``callsOut``), it records nothing.
    @inlinable public static func span<T>(
        _ name: String, ofKind kind: SpanKind = .internal, context: InstrumentationContext? = nil,
        _ body: (HeraldSpan?) async throws -> T
    ) async rethrows -> T {
        guard let tracer, !passesOn(context), let context = context ?? InstrumentationContext.current,
            context.traceContext != nil
        else { return try await body(nil) }
        return try await tracer.withSpan(name, context: context, ofKind: kind) { span in try await body(span) }
    }

    /// grpc.health.v1's methods: probes, not requests, and never traced.
    /// Adds attributes to the task's current span (no-op when tracing is off or nothing is traced).
    public static func annotate(_ update: (inout AttributeList) -> Void) {
        guard isOn, let span = InstrumentationContext.current?[ActiveSpanKey.self] else { return }
        span.updateInPlace(update)
    }

    /// A context whose parent is `traceparent` (as stored with an outbox send), for spans started
    /// later by background work on that send's behalf.
    public static func context(traceparent: String) -> InstrumentationContext? {
        guard let trace = parse(traceparent: traceparent, tracestate: nil) else { return nil }
        var context = InstrumentationContext.topLevel
        context.traceContext = trace
        return context
    }
}
