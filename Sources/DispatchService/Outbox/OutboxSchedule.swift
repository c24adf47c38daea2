import HeraldModel
import HeraldProto

/// Scheduled sends' rule and constants; storing, taking, cancelling and abandoning them are
/// ``Outbox``'s, for both databases.
extension Outbox {
    /// The rule both stores apply before storing a scheduled send.
    static func checkScheduledRoom(pending: Int, maxPending: Int, hub: String) throws {
        guard pending < maxPending else {
            throw ServiceError.resourceExhausted(
                "hub \(hub) has \(pending) scheduled sends waiting, the most it may; cancel some or wait until they are made",
                retryAfterSeconds: 60)
        }
    }

    /// How long a process's take of a due scheduled send keeps the others (and its own next tick)
    /// off it: a send whose making failed for a moment is tried again after that.
    static let scheduledTake: Int64 = 30_000
}
