import Foundation
import HeraldModel
import HeraldProto
public import HeraldRPC
import HeraldService
import HeraldTelemetry
public import Logging
import Metrics
import PushProviders
public import ServiceLifecycle
import Synchronization
import Tracing

/// Delivers the outbox: claims due deliveries in batches, hands each platform's share to its
/// sender, and records what happened (delivered, retry at, failed, handle dead, abandoned).
///
/// Each hub may have up to `workers` batches in flight (its window, which grows from one and
/// shrinks when its pushes time out), and all hubs together twice that: so a single hub has the
/// whole sender as before, and a hub whose provider answers slowly holds at most half of it
/// while the others' deliveries are claimed in batches of their own. A hub's
/// `max_concurrent_pushes` (``Outbox/setPushLimits(_:hub:)``) caps its deliveries in flight
/// besides. On PostgreSQL one-person sends have a fast lane of their own (``fastLane()``): a claim
/// of the personal lanes as soon as a send is committed, beside the claims of the batches. Dead handles
/// are reported to herald-registration from a durable queue, so feedback survives a restart too.
public final class DeliveryWorker: Service, Sendable {
    let outbox: Outbox
    /// Each hub's sender per platform; which platforms are recorded locally (the inbox, in the
    /// claim's own transaction) and which are claimed with a lease follows it as hubs' credentials change.
    let senders: HubSenders
    let registrations: any RegistrationServiceClientProtocol
    let policy: RetryPolicy
    let batchSize: Int
    let workers: Int
    let pushTimeout: Duration
    /// Per hub, how many batches it may have in flight: one at first, one more after each of its
    /// batches answered within a quarter of the push timeout, up to `workers`; halved when its
    /// pushes time out. A provider (or a machine) that answers slower than the timeout allows is
    /// given fewer pushes at once, rather than more of them queued to time out and go out again.
    /// Entries are hubs with deliveries (operator-created): bounded.
    let load = Mutex<[String: HubLoad]>([:])
    /// Hubs' `max_concurrent_pushes` that are set, read back every few seconds.
    let concurrency = Mutex<[String: Int]>([:])
    let logger: Logger
    let wakeup = Wakeup()
    /// The fast lane's (``fastLane()``): a send committed, or one of its batches finished.
    let fastWakeup = Wakeup()
    /// The fast lane's batches in flight: at most `workers`.
    let fastRunning = Mutex(0)
    let removing = Mutex(false)
    /// Batches in flight.
    let running = Mutex(0)
    /// Graceful shutdown began: claim nothing more.
    let stopping = Mutex(false)
    /// The leases of the batches claimed and not recorded yet (lease id → when it ends, Unix ms,
    /// as last written), renewed while they are in flight (see ``Outbox/renewLeases(_:)``).
    let inFlight = Mutex<[Int64: Int64]>([:])
    /// Delivered pushes given a span of their own so far, per traced send (DeliveryTracing.swift).
    let sampledDeliveries = Mutex<[String: Int]>([:])

    public init(
        outbox: Outbox, senders: HubSenders, registrations: any RegistrationServiceClientProtocol,
        policy: RetryPolicy,
        batchSize: Int = 500,
        workers: Int = 4, pushTimeout: Duration = .seconds(30), logger: Logger
    ) {
        self.outbox = outbox
        self.senders = senders
        self.registrations = registrations
        self.policy = policy
        self.batchSize = batchSize
        self.workers = workers
        self.pushTimeout = pushTimeout
        self.logger = logger
    }

    /// A send was committed: look for due deliveries now rather than at the next poll.
    public func wake() {
        committed.add(1, ordering: .relaxed)
        wakeup.signal()
        fastWakeup.signal()
    }

    /// Sends committed through ``wake()`` so far: a claim that found nothing of the hubs not held
    /// back is not made again until one is (or a second has passed: retries come due on their own).
    let committed = Atomic(0)

    public func run() async throws {
        let recovered = try await outbox.recoverLeases()
        if recovered > 0 {
            logger.notice(
                "resuming deliveries a previous process had started", metadata: ["herald.count": "\(recovered)"])
        }
        let renewer = Task { await self.renewLeases(every: outbox.leaseRenewalInterval) }
        // Its own task: a backlog keeps the loop below busy, and that is when the gauges matter.
        let sampler = Task { await self.sampleQueues(every: .seconds(1)) }
        defer {
            renewer.cancel()
            sampler.cancel()
        }
        // On graceful shutdown: claim nothing more, and let the batches in flight record their results.
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                // On SQLite every claim is a write through the file's one writer and takes a few
                // milliseconds: a second claimer would only queue behind the first.
                if outbox.postgres != nil { group.addTask { await self.fastLane() } }
                // The hubs held back when a claim last found nothing of the others (see below).
                var heldBack: (hubs: Set<String>, sends: Int, at: ContinuousClock.Instant)?
                while !Task.isCancelled, !stopping.withLock({ $0 }) {
                    let deliveredLocally = await deliverLocalBatch()
                    guard running.withLock({ $0 }) < 2 * workers else {
                        // Every batch slot is busy; a finishing batch signals.
                        if !deliveredLocally { await wakeup.wait(upTo: .seconds(1)) }
                        continue
                    }
                    let (room, personalOnly) = hubRoom()
                    let held = Set(room.lazy.filter { $0.value == 0 }.map(\.key)).union(personalOnly)
                    if let last = heldBack, !held.isEmpty, last.hubs == held,
                        last.sends == committed.load(ordering: .relaxed), ContinuousClock.now - last.at < .seconds(1)
                    {
                        // The same hubs held back as when the last claim found nothing else, and
                        // no send since: that claim would find nothing again. A finishing batch
                        // (which gives its hubs room) or a new send signals.
                        await wakeup.wait(upTo: .seconds(1))
                        continue
                    }
                    let sends = committed.load(ordering: .relaxed)
                    let claimStart = HeraldTracing.isOn ? DefaultTracerClock.now : nil
                    guard let batch = await claimRemoteBatch(room: room, personalOnly: personalOnly, wakeup: wakeup)
                    else { continue }
                    let claim = claimStart.map { ($0, DefaultTracerClock.now) }
                    if !batch.items.isEmpty {
                        running.withLock { $0 += 1 }
                        let perHub = started(batch, countsAsBatch: true)
                        group.addTask {
                            await self.deliver(batch, claim: claim)
                            self.finished(batch, perHub, countedAsBatch: true)
                            self.running.withLock { $0 -= 1 }
                            self.wakeup.signal()
                        }
                        continue
                    }
                    if deliveredLocally { continue }
                    if !held.isEmpty {
                        // Hubs held back by their window or cap may have rows due now, which
                        // idle() would not wait for: a finishing batch (or a new send) signals.
                        heldBack = (held, sends, ContinuousClock.now)
                        await wakeup.wait(upTo: .seconds(1))
                        continue
                    }
                    await idle()
                }
            }
        } onGracefulShutdown: {
            self.stopping.withLock { $0 = true }
            self.wakeup.signal()
            self.fastWakeup.signal()
        }
    }

    /// Local (inbox) deliveries: claimed, written and recorded in one transaction. True when it
    /// delivered any (so the loop goes round again without waiting).
    func deliverLocalBatch() async -> Bool {
        let platforms = senders.split.local
        guard !platforms.isEmpty else { return false }
        do {
            // Larger than remote batches: a local batch is only rows, and each transaction has a fixed cost.
            let done = try await outbox.deliverLocally(
                limit: max(batchSize, 2000), platforms: platforms, inbox: senders.inbox)
            for (platform, count) in done.delivered { DispatchMetrics.deliveries(platform, "delivered", count: count) }
            for (_, state) in done.finished { DispatchMetrics.sendFinished(state) }
            return !done.delivered.isEmpty
        } catch {
            logger.error("cannot record inbox deliveries", metadata: ["herald.error": "\(error)"])
            await wakeup.wait(upTo: .seconds(1))
            return false
        }
    }
    /// Claims due deliveries of the remote platforms (with a lease); nil after a database error
    /// (logged, and waited on for a second, or until `wakeup`, the caller's, is signalled).
    func claimRemoteBatch(
        room: [String: Int], personalOnly: Set<String>, onlyPersonal: Bool = false, wakeup: Wakeup
    ) async -> Outbox.ClaimedBatch? {
        let remotePlatforms = senders.split.remote
        guard !remotePlatforms.isEmpty else { return .empty }
        do {
            return try await outbox.claimBatch(
                limit: batchSize, platforms: remotePlatforms, room: room, personalOnly: personalOnly,
                onlyPersonal: onlyPersonal)
        } catch {
            logger.error("cannot claim deliveries", metadata: ["herald.error": "\(error)"])
            await wakeup.wait(upTo: .seconds(1))
            return nil
        }
    }

    /// Records the queues' depth and the oldest open send's age every `interval`, until cancelled.
    /// Hubs' concurrency caps and weights are read back every fifth time (set through any replica).
    func sampleQueues(every interval: Duration) async {
        var round = 0
        while !Task.isCancelled {
            if let depth = try? await outbox.depth() { DispatchMetrics.queueDepth(depth, now: unixMillis()) }
            if let queues = try? await outbox.hubQueues() { DispatchMetrics.hubQueues(queues) }
            if round % 5 == 0, let caps = try? await outbox.reloadClaimLimits() { concurrency.withLock { $0 = caps } }
            round &+= 1
            do { try await Task.sleep(for: interval) } catch { return }
        }
    }

    /// Nothing was due: report dead handles, and sleep until the next delivery is due (at most a
    /// second; a new send wakes it sooner).
    func idle() async {
        await flushRemovals()
        let due = (try? await outbox.nextDue()) ?? nil
        let wait = due.map { Duration.milliseconds(max(0, min($0 - unixMillis(), 1000))) } ?? .seconds(1)
        if wait > .zero { await wakeup.wait(upTo: wait) }
    }

    /// One claimed batch: sends each platform's share, then records every result in one transaction
    /// and ends the batch's lease. `claim`: when the batch's claim began and ended, for its traced
    /// sends' spans.
    ///
    /// A batch whose lease may have ended before its pushes go out (the process was stopped or
    /// starved between the claim and here) first renews it and keeps only the deliveries it still
    /// holds: what another replica took over in the meantime is that replica's to push, not this
    /// one's too.
    func deliver(
        _ batch: Outbox.ClaimedBatch, claim: (DefaultTracerClock.Instant, DefaultTracerClock.Instant)? = nil
    ) async {
        var items = batch.items
        let leaseEnds = inFlight.withLock { $0[batch.lease] } ?? batch.leaseEnds
        if batch.lease != 0, leaseEnds - outbox.now() < outbox.lease.wholeMilliseconds / 3 {
            do {
                let (held, until) = try await outbox.confirmLease(batch.lease, sequences: items.map(\.sequence))
                inFlight.withLock { if $0[batch.lease] != nil { $0[batch.lease] = until } }
                let lost = items.count - held.count
                if lost > 0 {
                    items.removeAll { !held.contains($0.sequence) }
                    DispatchMetrics.leasesLost(count: lost)
                    logger.warning(
                        "not pushing deliveries another replica took over", metadata: ["herald.count": "\(lost)"])
                }
            } catch {
                // Unknown: pushed as claimed. A result whose lease was taken over is dropped.
                logger.warning("cannot confirm a batch's lease", metadata: ["herald.error": "\(error)"])
            }
        }
        await deliver(items, lease: batch.lease, claim: claim)
    }

    /// ``deliver(_:claim:)``'s pushes and results, for `items` still held under `lease`.
    func deliver(
        _ items: [PushItem], lease: Int64, claim: (DefaultTracerClock.Instant, DefaultTracerClock.Instant)?
    ) async {
        // One share per hub and platform: each hub's pushes go out with its own credentials only.
        var shares: [HubPlatform: [PushItem]] = [:]
        for item in items { shares[HubPlatform(hub: item.hub, platform: item.platform), default: []].append(item) }
        let traced = HeraldTracing.isOn ? await traceContexts(of: items) : [:]
        let pushStart = ContinuousClock.now
        // Each hub's window follows its own shares: how long they took, whether any timed out.
        var answered: [String: (took: Duration, timedOut: Bool)] = [:]
        let decisions = await withTaskGroup(of: (String, [Outbox.Decision]).self) { group in
            for (key, share) in shares {
                group.addTask {
                    // Read only for a traced send's spans: no clock on the untraced path.
                    let start = traced.isEmpty ? nil : DefaultTracerClock.now
                    let results: [PushResult]
                    if let sender = self.senders.sender(hub: key.hub, platform: key.platform) {
                        results = await sender.send(share)
                    } else {
                        results = Array(repeating: .failed(status: 0, reason: "NoCredentials"), count: share.count)
                    }
                    self.senders.note(hub: key.hub, platform: key.platform, results)
                    if let start {
                        self.recordSpans(
                            share, results, key: key, sent: (start, DefaultTracerClock.now), traced: traced)
                    }
                    return (key.hub, self.decideAll(share, results))
                }
            }
            var all: [Outbox.Decision] = []
            for await (hub, part) in group {
                let timedOut = part.contains { $0.reason == PushHTTP.timeoutReason }
                let took = ContinuousClock.now - pushStart
                answered[hub] = (took, timedOut || answered[hub]?.timedOut == true)
                all.append(contentsOf: part)
            }
            return all
        }
        for (hub, answer) in answered { adjustWindow(hub: hub, timedOut: answer.timedOut, took: answer.took) }
        if let claim, !traced.isEmpty { recordClaimSpans(items, claim: claim, traced: traced) }
        do {
            let finished = try await outbox.record(decisions, lease: lease)
            for (_, state) in finished { DispatchMetrics.sendFinished(state) }
        } catch {
            // The leases stay: a restart (recoverLeases) makes these deliveries due again, and on
            // PostgreSQL so does their expiry.
            logger.error("cannot record delivery results", metadata: ["herald.error": "\(error)"])
        }
        if decisions.contains(where: { $0.removal != nil }) { await flushRemovals() }
    }
}
