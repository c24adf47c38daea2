import HeraldTelemetry
import Tracing

extension DeliveryWorker {
    /// The fast lane, on PostgreSQL: claims one-person sends (every hub's personal
    /// lane) as soon as a send is committed, here or on another replica, beside the loop above. That loop claims one
    /// batch at a time, and on a busy PostgreSQL a claim of a broadcast's 500 rows takes 100–250
    /// ms: a one-person send committed just after one began waited for it, and then for its own.
    /// Here it waits only for a claim of the personal lanes, which hold few rows. Batches are
    /// counted in their hubs' deliveries in flight (so `max_concurrent_pushes` holds) but not in
    /// their windows, which pace the broadcasts; at most `workers` of them are in flight. The loop
    /// above still claims personal lanes first too: rows are taken by whichever claim comes first.
    func fastLane() async {
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled, !stopping.withLock({ $0 }) {
                await fastWakeup.wait(upTo: .seconds(1))
                while !Task.isCancelled, !stopping.withLock({ $0 }), fastRunning.withLock({ $0 }) < workers {
                    let claimStart = HeraldTracing.isOn ? DefaultTracerClock.now : nil
                    guard
                        let batch = await claimRemoteBatch(
                            room: capRoom(), personalOnly: [], onlyPersonal: true, wakeup: fastWakeup),
                        !batch.items.isEmpty
                    else { break }
                    let claim = claimStart.map { ($0, DefaultTracerClock.now) }
                    fastRunning.withLock { $0 += 1 }
                    let perHub = started(batch, countsAsBatch: false)
                    group.addTask {
                        await self.deliver(batch, claim: claim)
                        self.finished(batch, perHub, countedAsBatch: false)
                        self.fastRunning.withLock { $0 -= 1 }
                        self.fastWakeup.signal()
                    }
                }
            }
        }
    }
}
