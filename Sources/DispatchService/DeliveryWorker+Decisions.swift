import HeraldModel
import HeraldProto
import PushProviders

extension DeliveryWorker {
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

    func decision(_ item: PushItem, _ result: PushResult, now: Int64) -> (Outbox.Decision, String) {
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
