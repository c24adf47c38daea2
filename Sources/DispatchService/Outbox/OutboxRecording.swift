import HeraldModel
public import HeraldProto
import PushProviders

/// Recording what the worker decided for each delivery, and the counters an outcome is read from.
extension Outbox {
    /// Where one delivery goes next, as the worker decided it.
    public struct Decision: Sendable {
        public var sequence: Int64
        public var notificationID: String
        public var platform: Platform
        public var state: DeliveryState
        public var status: Int
        public var reason: String
        /// Pending: when to try again, Unix ms.
        public var nextAttemptAt: Int64
        /// Set when the handle is dead and registration must delete it.
        public var removal: (platform: Platform, handle: String, since: Int64)?
        /// The attempt was not counted when claimed (local deliveries take no lease): count it now.
        public var countsAttempt = false
        /// The attempt the claim counted (``PushItem/attempt``): on PostgreSQL the result holds
        /// only while the row is still at it (its lease was not taken over). 0: no claim (local).
        public var attempt = 0
    }

    /// The results of deliveries written to the inbox in their claim's own transaction: delivered,
    /// their attempt counted now (they took no lease); and how many per platform.
    static func deliveredLocally(_ items: [PushItem], at: Int64) -> (delivered: [Platform: Int], decisions: [Decision])
    {
        var delivered: [Platform: Int] = [:]
        let decisions = items.map { item in
            delivered[item.platform, default: 0] += 1
            return Decision(
                sequence: item.sequence, notificationID: item.notificationID, platform: item.platform,
                state: .delivered,
                status: 200, reason: "", nextAttemptAt: at, removal: nil, countsAttempt: true)
        }
        return (delivered, decisions)
    }

    /// Counter changes of one (notification, platform), applied once per batch.
    struct Delta {
        var success = 0, failure = 0, pending = 0, removed = 0, retries = 0
        var failures: [String: Int] = [:]

        /// The counter changes `decisions` make, per notification and platform.
        static func of(_ decisions: [Decision]) -> [String: [Platform: Delta]] {
            var deltas: [String: [Platform: Delta]] = [:]
            for d in decisions {
                var delta = deltas[d.notificationID]?[d.platform] ?? Delta()
                switch d.state {
                case .pending: delta.retries += 1
                case .delivered:
                    delta.success += 1
                    delta.pending -= 1
                default:
                    delta.failure += 1
                    delta.pending -= 1
                    delta.failures[d.state == .abandoned ? "Abandoned" : d.reason, default: 0] += 1
                    if d.removal != nil { delta.removed += 1 }
                }
                deltas[d.notificationID, default: [:]][d.platform] = delta
            }
            return deltas
        }
    }

    /// Delivered results alike, recorded by one statement: their status, whether the attempt is
    /// counted now, and the attempt their claim counted.
    struct DeliveredKey: Hashable {
        var status: Int
        var countsAttempt: Bool
        var attempt: Int
    }
}
