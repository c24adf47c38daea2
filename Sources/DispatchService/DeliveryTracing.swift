import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTelemetry
import PushProviders
import Tracing

/// A send's deliveries in its trace, without a span per delivery: a send to 100,000 devices would
/// otherwise be a 100,000-span trace, and the tracing would cost more than the pushes.
///
/// Each claimed batch adds, under the span that made the send (its traceparent is stored with the
/// send), one `outbox.claim` span and one `push <platform>` span per hub and platform, with the
/// batch's counts; below that, a span per push request for the send's first
/// ``DeliveryWorker/sampledDeliverySpans`` delivered pushes (per dispatch process) and for up to as
/// many failed ones per batch, with its status and reason. A send to 100,000 devices in batches of
/// 500 is then about 400 batch spans and a few dozen request spans. A push's span covers its
/// batch's time on the wire: a batch's requests go out together on shared HTTP/2 connections.
extension DeliveryWorker {
    /// Request spans of delivered pushes per send, and of failed ones per send and batch.
    static let sampledDeliverySpans = 8
    /// Sends whose sampled count is remembered; beyond it the memory starts again (a send then
    /// gets a few more request spans, nothing worse).
    static let sampledSendsKept = 4096

    /// The trace contexts of the traced sends among `items` (one read per batch, only when tracing is on).
    func traceContexts(of items: [PushItem]) async -> [String: InstrumentationContext] {
        let ids = Array(Set(items.map(\.notificationID)))
        guard let parents = try? await outbox.traceParents(of: ids) else { return [:] }
        return parents.compactMapValues { HeraldTracing.context(traceparent: $0) }
    }

    func recordClaimSpans(
        _ items: [PushItem], claim: (DefaultTracerClock.Instant, DefaultTracerClock.Instant),
        traced: [String: InstrumentationContext], tracer: HeraldTracer? = HeraldTracing.tracer
    ) {
        guard let tracer else { return }
        var counts: [String: Int] = [:]
        for item in items where traced[item.notificationID] != nil { counts[item.notificationID, default: 0] += 1 }
        for (id, count) in counts {
            guard let context = traced[id] else { continue }
            let span = tracer.startSpan("outbox.claim", context: context, ofKind: .internal, at: claim.0)
            span.setAttribute("herald.notification_id", id)
            span.setAttribute("herald.deliveries", count)
            span.setAttribute("herald.batch_size", items.count)
            span.end(at: claim.1)
        }
    }

    func recordSpans(
        _ share: [PushItem], _ results: [PushResult], key: HubPlatform,
        sent: (DefaultTracerClock.Instant, DefaultTracerClock.Instant), traced: [String: InstrumentationContext],
        tracer: HeraldTracer? = HeraldTracing.tracer
    ) {
        guard let tracer else { return }
        var bySend: [String: [(item: PushItem, status: Int, reason: String, ok: Bool)]] = [:]
        for (item, result) in zip(share, results) where traced[item.notificationID] != nil {
            let (status, reason, ok) = Self.describe(result)
            bySend[item.notificationID, default: []].append((item, status, reason, ok))
        }
        for (id, deliveries) in bySend {
            guard let context = traced[id] else { continue }
            let batch = tracer.startSpan("push \(key.platform.name)", context: context, ofKind: .client, at: sent.0)
            var delivered = 0
            var failedSampled = 0
            var okSpans = sampledDeliveries.withLock { counts -> Int in
                if counts.count >= Self.sampledSendsKept, counts[id] == nil { counts.removeAll() }
                let allowed = max(0, Self.sampledDeliverySpans - counts[id, default: 0])
                let oks = deliveries.lazy.filter(\.ok).count
                counts[id, default: 0] += min(allowed, oks)
                return allowed
            }
            for (item, status, reason, ok) in deliveries {
                if ok { delivered += 1 }
                if ok {
                    guard okSpans > 0 else { continue }
                    okSpans -= 1
                } else {
                    guard failedSampled < Self.sampledDeliverySpans else { continue }
                    failedSampled += 1
                }
                let push = tracer.startSpan(
                    "\(key.platform.name) request", context: batch.context, ofKind: .client, at: sent.0)
                push.setAttribute("http.response.status_code", status)
                push.setAttribute("herald.reason", reason)
                push.setAttribute("herald.message_id", item.messageID)
                push.setAttribute("herald.attempt", item.attempt)
                if !ok { push.setStatus(SpanStatus(code: .error, message: reason)) }
                push.end(at: sent.1)
            }
            batch.setAttribute("herald.notification_id", id)
            batch.setAttribute("herald.hub", key.hub)
            batch.setAttribute("herald.platform", key.platform.name)
            batch.setAttribute("herald.deliveries", deliveries.count)
            batch.setAttribute("herald.delivered", delivered)
            batch.setAttribute("herald.not_delivered", deliveries.count - delivered)
            if delivered < deliveries.count {
                batch.setStatus(SpanStatus(code: .error, message: "\(deliveries.count - delivered) not delivered"))
            }
            batch.end(at: sent.1)
        }
    }

    /// A result's HTTP status, reason, and whether it was delivered.
    static func describe(_ result: PushResult) -> (Int, String, Bool) {
        switch result {
        case .delivered(let status): (Int(status), "", true)
        case .failed(let status, let reason): (Int(status), reason, false)
        case .unregistered(let status, let reason, _): (Int(status), reason, false)
        case .retry(let status, let reason, _): (Int(status), reason, false)
        }
    }
}
