import HeraldModel

extension DeliveryWorker {
    /// `batch` is in flight: its lease is renewed, and its rows count in their hubs' load.
    func started(_ batch: Outbox.ClaimedBatch, countsAsBatch: Bool) -> [String: Int] {
        if batch.takenOver > 0 {
            DispatchMetrics.takeovers(count: batch.takenOver)
            logger.notice(
                "took over deliveries whose lease had ended", metadata: ["herald.count": "\(batch.takenOver)"])
        }
        inFlight.withLock { $0[batch.lease] = batch.leaseEnds }
        let perHub = Self.itemsPerHub(batch.items)
        load.withLock { load in
            for (hub, count) in perHub {
                if countsAsBatch { load[hub, default: HubLoad()].batches += 1 }
                load[hub, default: HubLoad()].items += count
            }
        }
        return perHub
    }

    /// `batch`'s results are recorded: what ``started(_:countsAsBatch:)`` counted is taken back.
    func finished(_ batch: Outbox.ClaimedBatch, _ perHub: [String: Int], countedAsBatch: Bool) {
        load.withLock { load in
            for (hub, count) in perHub {
                if countedAsBatch { load[hub]?.batches -= 1 }
                load[hub]?.items -= count
            }
        }
        inFlight.withLock { $0[batch.lease] = nil }
    }

    /// Extends the leases of the batches in flight every `interval`, until cancelled: one small
    /// row per batch. A failed renewal is only logged: the next one tries again, and a lease that
    /// does run out is taken over by another replica as if this one had died (its results are
    /// then dropped, and what it had not pushed yet it does not push: ``deliver(_:claim:)``).
    func renewLeases(every interval: Duration) async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            let held = inFlight.withLock { Array($0.keys) }
            guard !held.isEmpty else { continue }
            let started = outbox.now()
            do {
                let (renewed, until) = try await outbox.renewLeases(held)
                inFlight.withLock { leases in
                    for id in renewed where leases[id] != nil { leases[id] = until }
                }
                let late = held.filter { !renewed.contains($0) }
                if !late.isEmpty, inFlight.withLock({ leases in late.contains { leases[$0] != nil } }) {
                    logger.warning("leases in flight were gone", metadata: ["herald.count": "\(late.count)"])
                }
                let took = outbox.now() - started
                if took > outbox.lease.wholeMilliseconds / 3 {
                    logger.warning(
                        "renewing leases took a third of their length", metadata: ["herald.milliseconds": "\(took)"])
                }
            } catch {
                logger.warning("cannot renew leases", metadata: ["herald.error": "\(error)"])
            }
        }
    }
}
