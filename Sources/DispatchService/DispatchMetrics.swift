import HeraldModel
import HeraldProto
import Metrics
import Synchronization

/// Every metric herald-dispatch reports, in one place: names, labels and what each counts.
/// (RPC metrics come from the method table; HTTP ones from the edge.)
enum DispatchMetrics {
    /// `herald_sends_total{state}`: sends that reached a final state (or NO_TARGET_FOUND at once).
    static func sendFinished(_ state: OutcomeState) {
        Counter(label: "herald_sends_total", dimensions: [("state", "\(state)")]).increment()
    }

    /// `herald_scheduled_lateness_seconds`: how long after its time a scheduled send was made
    /// (the scheduler looks every 250 ms; longer after a restart that spanned the time).
    static func scheduledFired(lateness: Duration) {
        Metrics.Timer(label: "herald_scheduled_lateness_seconds").recordNanoseconds(Int64(lateness.wholeNanoseconds))
    }

    /// `herald_deliveries_total{platform,outcome}`: delivery attempts by what came of them
    /// (delivered, failed, unregistered, retry, abandoned).
    static func deliveries(_ platform: Platform, _ outcome: String, count: Int = 1) {
        Counter(label: "herald_deliveries_total", dimensions: [("platform", platform.name), ("outcome", outcome)])
            .increment(by: count)
    }

    /// `herald_removed_handles_total{platform}`: dead handles herald-registration has removed.
    static func removedHandle(_ platform: Platform) {
        Counter(label: "herald_removed_handles_total", dimensions: [("platform", platform.name)]).increment()
    }

    /// `herald_outbox_leases_lost_total`: deliveries this replica claimed and did not push because
    /// its lease on them had ended and another replica had taken them over (a stalled replica, or
    /// renewals that failed or came late). Such deliveries are pushed once, by the taker.
    static func leasesLost(count: Int) {
        Counter(label: "herald_outbox_leases_lost_total").increment(by: count)
    }

    /// `herald_outbox_takeovers_total`: deliveries this replica claimed after another holder's
    /// lease on them had ended (a replica that died or stalled, or this one's own restart).
    static func takeovers(count: Int) {
        Counter(label: "herald_outbox_takeovers_total").increment(by: count)
    }

    /// `herald_outbox_pending`, `herald_handle_removals_pending`: the queues' depth, and
    /// `herald_outbox_oldest_age_seconds`: how long ago the oldest send still enqueued or
    /// processing was made (0 when none is); sampled each second. A backlog that drains keeps the
    /// age low; a stuck one (a provider down, a dead worker) makes it climb toward the retry window.
    static func queueDepth(_ depth: OutboxDepth, now: Int64) {
        Gauge(label: "herald_outbox_pending").record(depth.pending)
        Gauge(label: "herald_handle_removals_pending").record(depth.removals)
        let age = depth.oldestOpenSend.map { max(0, Double(now - $0) / 1000) } ?? 0
        Gauge(label: "herald_outbox_oldest_age_seconds").record(age)
    }

    /// Hubs the per-hub gauges have named: one whose queue empties reads 0, not its last value.
    private static let namedHubs = Mutex<Set<String>>([])

    /// `herald_outbox_hub_pending{hub}` and `herald_outbox_hub_oldest_due_seconds{hub}` (hub ids,
    /// at most ``Outbox/metricHubs``): each hub's deliveries not finished, and how long its oldest
    /// due delivery has waited for a claim (0 when none is due); sampled each second. Fair claims
    /// keep the second low for every hub however large another's backlog; one that climbs says the
    /// hub's share is not enough, or dispatch stopped claiming. The hub `default` is always named.
    static func hubQueues(_ queues: [HubQueue]) {
        var current = Dictionary(queues.map { ($0.hub, $0) }, uniquingKeysWith: { first, _ in first })
        if current[Names.defaultHub] == nil {
            current[Names.defaultHub] = HubQueue(hub: Names.defaultHub, pending: 0, oldestDue: 0)
        }
        let emptied = namedHubs.withLock { named -> Set<String> in
            let gone = named.subtracting(current.keys)
            named = Set(current.keys)
            return gone
        }
        for hub in emptied { current[hub] = HubQueue(hub: hub, pending: 0, oldestDue: 0) }
        for queue in current.values {
            Gauge(label: "herald_outbox_hub_pending", dimensions: [("hub", queue.hub)]).record(queue.pending)
            Gauge(label: "herald_outbox_hub_oldest_due_seconds", dimensions: [("hub", queue.hub)])
                .record(Double(queue.oldestDue) / 1000)
        }
    }
}
