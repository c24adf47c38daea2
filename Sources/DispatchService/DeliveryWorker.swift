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

/// How retries are spaced: exponential backoff with jitter, never sooner than the push service's
/// `Retry-After`, given up at the delivery's retry window or expiry.
public struct RetryPolicy: Sendable {
    /// Delay before the second attempt (doubled for each further one).
    public var base: Duration
    /// The longest delay between two attempts.
    public var cap: Duration

    public init(base: Duration = .seconds(1), cap: Duration = .seconds(300)) {
        self.base = base
        self.cap = cap
    }

    /// The delay after failed attempt number `attempt` (1-based): base × 2^(attempt−1), capped,
    /// scaled by a random factor in [0.5, 1] ("equal jitter", so retries of a burst spread out but
    /// never come sooner than half the backoff), and at least `retryAfter`.
    public func delay(afterAttempt attempt: Int, retryAfter: Duration?, random: Double = Double.random(in: 0.5...1))
        -> Duration
    {
        let exponent = min(max(attempt - 1, 0), 30)
        let raw = min(base.wholeMilliseconds * (Int64(1) << exponent), cap.wholeMilliseconds)
        let jittered = Duration.milliseconds(Int64(Double(raw) * random))
        guard let retryAfter else { return jittered }
        return max(jittered, retryAfter)
    }
}

/// Wakes a sleeping worker early (a send was committed). A signal that finds no sleeper is kept
/// for the next wait, so none is lost; spurious wake-ups are harmless.
final class Wakeup: Sendable {
    private let state = Mutex<(pending: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    func wait(upTo timeout: Duration) async {
        let timer = Task { [weak self] in
            // Cancelled when the wait ended otherwise: then it must not signal (that would make
            // the next wait return at once, and the worker spin).
            do { try await Task.sleep(for: timeout) } catch { return }
            self?.signal()
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    if state.pending {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            signal()
        }
        timer.cancel()
    }
}

/// A hub and a platform: the key of one sender.
struct HubPlatform: Hashable {
    var hub: String
    var platform: Platform
}

/// What one hub holds of the delivery worker: batches in flight with its deliveries, how many it
/// may have (its window), and its deliveries in flight.
struct HubLoad {
    var batches = 0
    var window = 1
    var items = 0
}

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
    private let senders: HubSenders
    private let registrations: any RegistrationServiceClientProtocol
    private let policy: RetryPolicy
    private let batchSize: Int
    private let workers: Int
    private let pushTimeout: Duration
    /// Per hub, how many batches it may have in flight: one at first, one more after each of its
    /// batches answered within a quarter of the push timeout, up to `workers`; halved when its
    /// pushes time out. A provider (or a machine) that answers slower than the timeout allows is
    /// given fewer pushes at once, rather than more of them queued to time out and go out again.
    /// Entries are hubs with deliveries (operator-created): bounded.
    private let load = Mutex<[String: HubLoad]>([:])
    /// Hubs' `max_concurrent_pushes` that are set, read back every few seconds.
    private let concurrency = Mutex<[String: Int]>([:])
    private let logger: Logger
    private let wakeup = Wakeup()
    /// The fast lane's (``fastLane()``): a send committed, or one of its batches finished.
    private let fastWakeup = Wakeup()
    /// The fast lane's batches in flight: at most `workers`.
    private let fastRunning = Mutex(0)
    private let removing = Mutex(false)
    /// Batches in flight.
    private let running = Mutex(0)
    /// Graceful shutdown began: claim nothing more.
    private let stopping = Mutex(false)
    /// The leases of the batches claimed and not recorded yet (lease id → when it ends, Unix ms,
    /// as last written), renewed while they are in flight (see ``Outbox/renewLeases(_:)``).
    private let inFlight = Mutex<[Int64: Int64]>([:])
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
    private let committed = Atomic(0)

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

    /// The fast lane, on PostgreSQL: claims one-person sends (every hub's personal
    /// lane) as soon as a send is committed, here or on another replica, beside the loop above. That loop claims one
    /// batch at a time, and on a busy PostgreSQL a claim of a broadcast's 500 rows takes 100–250
    /// ms: a one-person send committed just after one began waited for it, and then for its own.
    /// Here it waits only for a claim of the personal lanes, which hold few rows. Batches are
    /// counted in their hubs' deliveries in flight (so `max_concurrent_pushes` holds) but not in
    /// their windows, which pace the broadcasts; at most `workers` of them are in flight. The loop
    /// above still claims personal lanes first too: rows are taken by whichever claim comes first.
    private func fastLane() async {
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

    /// `batch` is in flight: its lease is renewed, and its rows count in their hubs' load.
    private func started(_ batch: Outbox.ClaimedBatch, countsAsBatch: Bool) -> [String: Int] {
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
    private func finished(_ batch: Outbox.ClaimedBatch, _ perHub: [String: Int], countedAsBatch: Bool) {
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
    private func renewLeases(every interval: Duration) async {
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

    /// Local (inbox) deliveries: claimed, written and recorded in one transaction. True when it
    /// delivered any (so the loop goes round again without waiting).
    private func deliverLocalBatch() async -> Bool {
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

    /// How many deliveries of each hub the next claim may take: at most what its
    /// `max_concurrent_pushes` leaves; of a hub with its window's batches in flight, only its
    /// personal lane (`personalOnly`, up to one batch more than its window, so that its
    /// one-person sends do not wait for its broadcast's batches), and none past that; unnamed
    /// hubs as many as the claim holds.
    func hubRoom() -> (room: [String: Int], personalOnly: Set<String>) {
        let caps = concurrency.withLock { $0 }
        return load.withLock { load in
            var room = Self.room(caps: caps, load: load)
            var personalOnly = Set<String>()
            for (hub, held) in load where held.batches >= held.window {
                if held.batches == held.window, room[hub] != 0 {
                    personalOnly.insert(hub)
                    room[hub] = min(room[hub] ?? .max, DeliveryLane.personalDevices)
                } else {
                    room[hub] = 0
                }
            }
            return (room, personalOnly)
        }
    }

    /// How many deliveries of each hub the fast lane may claim: what its `max_concurrent_pushes`
    /// leaves (its window paces its broadcasts, not its one-person sends).
    func capRoom() -> [String: Int] {
        let caps = concurrency.withLock { $0 }
        return load.withLock { Self.room(caps: caps, load: $0) }
    }

    /// What each hub's `max_concurrent_pushes` (`caps`) leaves beside its deliveries in flight.
    static func room(caps: [String: Int], load: [String: HubLoad]) -> [String: Int] {
        caps.reduce(into: [:]) { room, cap in room[cap.key] = max(0, cap.value - (load[cap.key]?.items ?? 0)) }
    }

    static func itemsPerHub(_ items: [PushItem]) -> [String: Int] {
        var counts: [String: Int] = [:]
        for item in items { counts[item.hub, default: 0] += 1 }
        return counts
    }

    /// Claims due deliveries of the remote platforms (with a lease); nil after a database error
    /// (logged, and waited on for a second, or until `wakeup`, the caller's, is signalled).
    private func claimRemoteBatch(
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
    private func sampleQueues(every interval: Duration) async {
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
    private func idle() async {
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
    private func deliver(
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

    /// Halves the batches `hub` may have in flight after its pushes timed out; adds one back after
    /// a batch with its pushes answered within a quarter of the push timeout.
    private func adjustWindow(hub: String, timedOut: Bool, took: Duration) {
        let (before, after) = load.withLock { load -> (Int, Int) in
            var held = load[hub] ?? HubLoad()
            let before = held.window
            if timedOut {
                held.window = max(1, held.window / 2)
            } else if took < pushTimeout / 4 {
                held.window = min(workers, held.window + 1)
            }
            load[hub] = held
            return (before, held.window)
        }
        if after < before {
            logger.notice(
                "pushes timed out: fewer batches in flight",
                metadata: ["herald.hub": "\(hub)", "herald.batches": "\(after)", "herald.before": "\(before)"])
        }
    }

    /// ``decide(_:_:now:)`` for a share, with one metrics update per outcome rather than per
    /// delivery (a counter looked up per delivery was a measurable part of a fan-out's CPU).
    func decideAll(_ items: [PushItem], _ results: [PushResult]) -> [Outbox.Decision] {
        let now = unixMillis()
        var counts: [String: Int] = [:]
        let decisions = zip(items, results).map { item, result in
            let (decision, outcome) = decision(item, result, now: now)
            counts[outcome, default: 0] += 1
            return decision
        }
        if let platform = items.first?.platform {
            for (outcome, count) in counts { DispatchMetrics.deliveries(platform, outcome, count: count) }
        }
        return decisions
    }

    /// Turns a sender's result into the delivery's next state.
    func decide(_ item: PushItem, _ result: PushResult, now: Int64 = unixMillis()) -> Outbox.Decision {
        let (decision, outcome) = decision(item, result, now: now)
        DispatchMetrics.deliveries(item.platform, outcome)
        return decision
    }

    private func decision(_ item: PushItem, _ result: PushResult, now: Int64) -> (Outbox.Decision, String) {
        var decision = Outbox.Decision(
            sequence: item.sequence, notificationID: item.notificationID, platform: item.platform, state: .failed,
            status: 0, reason: "",
            nextAttemptAt: now, removal: nil, attempt: item.attempt)
        let outcome: String
        switch result {
        case .delivered(let status):
            decision.state = .delivered
            decision.status = status
            outcome = "delivered"
        case .failed(let status, let reason):
            decision.status = status
            decision.reason = reason
            outcome = "failed"
        case .unregistered(let status, let reason, let since):
            decision.status = status
            decision.reason = reason
            decision.removal = (item.platform, item.handle, since)
            outcome = "unregistered"
        case .retry(let status, let reason, let after):
            decision.status = status
            decision.reason = reason
            let next = now + policy.delay(afterAttempt: item.attempt, retryAfter: after).wholeMilliseconds
            let expiry = item.payload.options.expiresAtUnixMs > 0 ? item.payload.options.expiresAtUnixMs : Int64.max
            if next > min(item.giveUpAt, expiry) {
                decision.state = .abandoned
                outcome = "abandoned"
            } else {
                decision.state = .pending
                decision.nextAttemptAt = next
                outcome = "retry"
            }
        }
        if outcome != "delivered" {
            logger.debug(
                "delivery \(outcome)",
                metadata: [
                    "herald.notification_id": "\(item.notificationID)", "herald.message_id": "\(item.messageID)",
                    "herald.attempt": "\(item.attempt)", "herald.status": "\(decision.status)",
                    "herald.reason": "\(decision.reason)",
                ])
        }
        return (decision, outcome)
    }

    /// Reports queued dead handles to herald-registration; those it cannot reach stay queued for
    /// the next flush. One flush at a time.
    func flushRemovals() async {
        let started = removing.withLock { busy -> Bool in
            if busy { return false }
            busy = true
            return true
        }
        guard started else { return }
        defer { removing.withLock { $0 = false } }
        while let batch = try? await outbox.pendingRemovals(limit: 100), !batch.isEmpty {
            for removal in batch {
                do {
                    _ = try await registrations.removeHandle(
                        RemoveHandleRequest(
                            platform: removal.platform, handle: removal.handle, invalidSinceUnixMs: removal.since))
                    try await outbox.removalDone(removal.id)
                    DispatchMetrics.removedHandle(removal.platform)
                } catch {
                    logger.warning("cannot remove a dead handle yet", metadata: ["herald.error": "\(error)"])
                    return
                }
            }
        }
    }
}
