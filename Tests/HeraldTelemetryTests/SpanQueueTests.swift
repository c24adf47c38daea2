import HeraldTestSupport
import Testing
import Tracing
import W3CTraceContext

@testable import HeraldTelemetry

/// The exporter's batching (OTel's batch span processor): a batch goes when it is full or when the
/// schedule comes, and the queue holds no more than its capacity.
@Suite("span queue", .watchedForStalls)
struct SpanQueueTests {
    static func span(_ number: Int) -> FinishedSpan {
        let trace = TraceContext(
            traceID: TraceID(bytes: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)),
            spanID: SpanID(bytes: (0, 0, 0, 0, 0, 0, 0, UInt8(truncatingIfNeeded: number + 1))),
            flags: .sampled, state: TraceState())
        return FinishedSpan(
            name: "span \(number)", trace: trace, parentSpanID: nil, kind: .internal, startNanos: 0, endNanos: 1,
            attributes: AttributeList(), status: nil, events: [], links: [])
    }

    /// What an export loop woken by full batches sends: full batches, and the rest only on schedule.
    /// Before, each wake-up sent everything queued, so the spans that came in while one export ran
    /// went as a small batch of their own, and a busy process exported a few spans at a time.
    @Test func fullBatchesFirstTheRestOnSchedule() {
        var queue = SpanQueue(capacity: 100, batchSize: 4)
        for number in 0..<3 { #expect(queue.append(Self.span(number)) == (accepted: true, full: false)) }
        #expect(queue.take(all: false).isEmpty, "three of four: not a batch yet")
        #expect(queue.append(Self.span(3)) == (accepted: true, full: true))
        // The loop, once woken, takes every full batch there is: the spans after the one that made
        // a batch do not wake it again.
        #expect(queue.append(Self.span(4)) == (accepted: true, full: false))
        for number in 5..<10 { _ = queue.append(Self.span(number)) }
        let first = queue.take(all: false)
        #expect(first.map(\.name) == ["span 0", "span 1", "span 2", "span 3"])
        #expect(queue.take(all: false).count == 4)
        #expect(queue.take(all: false).isEmpty, "two left: they wait for the schedule")
        #expect(queue.spans.count == 2)
        #expect(queue.take(all: true).map(\.name) == ["span 8", "span 9"])
        #expect(queue.take(all: true).isEmpty)
    }

    /// After a take, the queue wakes the loop again when the next batch is made, whatever was left.
    @Test func eachBatchWakesOnce() {
        var queue = SpanQueue(capacity: 100, batchSize: 4)
        let wakes = (0..<10).map { queue.append(Self.span($0)).full }
        #expect(wakes.filter { $0 }.count == 1, "one batch made while the loop was not taking")
        _ = queue.take(all: false)
        _ = queue.take(all: false)
        #expect(queue.spans.count == 2)
        #expect(queue.append(Self.span(10)).full == false)
        #expect(queue.append(Self.span(11)).full == true, "the next batch made wakes it")
    }

    /// On schedule (and at the drain) everything goes, still a batch at a time.
    @Test func scheduleSendsEverythingInBatches() {
        var queue = SpanQueue(capacity: 100, batchSize: 4)
        for number in 0..<9 { _ = queue.append(Self.span(number)) }
        #expect([queue.take(all: true).count, queue.take(all: true).count, queue.take(all: true).count] == [4, 4, 1])
        #expect(queue.take(all: true).isEmpty)
    }

    /// Bounded: a span that finds the queue full is refused (the exporter counts it dropped), and
    /// settings that make no sense are held to a queue of at least one and a batch no larger than it.
    @Test func boundedAndSane() {
        var queue = SpanQueue(capacity: 3, batchSize: 10)
        #expect(queue.batchSize == 3)
        for number in 0..<3 { #expect(queue.append(Self.span(number)).accepted) }
        #expect(queue.append(Self.span(3)) == (accepted: false, full: false), "the batch that filled it woke the loop")
        #expect(queue.spans.count == 3)
        let odd = SpanQueue(capacity: 0, batchSize: -5)
        #expect(odd.capacity == 1 && odd.batchSize == 1)
    }
}
