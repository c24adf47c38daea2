import HeraldTelemetry
import Synchronization

/// The spans a test's tracer has finished, in order.
public final class CollectedSpans: Sendable {
    let spans = Mutex<[FinishedSpan]>([])

    public init() {}

    public var all: [FinishedSpan] { spans.withLock { $0 } }
}

/// A ``HeraldTracer`` that hands each finished span to the returned list instead of an exporter
/// (not installed: the test passes it where a tracer is wanted).
public func collectingTracer(
    _ sampler: TraceSampler = .always, parentBased: Bool = true
) -> (HeraldTracer, CollectedSpans) {
    let collected = CollectedSpans()
    let tracer = HeraldTracer(resource: [("service.name", "t")], sampler: sampler, parentBased: parentBased) {
        span in collected.spans.withLock { $0.append(span) }
    }
    return (tracer, collected)
}
