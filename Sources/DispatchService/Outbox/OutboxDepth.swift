import HeraldModel
public import HeraldProto

/// The queues' depth, sampled each second for the metrics.
public struct OutboxDepth: Sendable {
    /// Deliveries waiting for an attempt (or a retry).
    public var pending: Int
    /// Dead handles not yet removed from herald-registration.
    public var removals: Int
    /// When the oldest send still enqueued or processing was made (Unix ms); nil when none is.
    public var oldestOpenSend: Int64?
}

/// Rows of ``Outbox/recentPlatformResults(hub:since:limit:)``, newest first.
public struct OutboxPlatformResults: Sendable {
    public var counts: [(platform: Platform, createdAt: Int64, success: Int64, failure: Int64, pending: Int64)] = []
    public var failures: [(platform: Platform, createdAt: Int64, reason: String)] = []

    /// Per platform: the newest failure reason and when its send was made, and whether the newest
    /// finished send on that platform failed on every device.
    public func health() -> [Platform: (lastError: String, at: Int64, failing: Bool)] {
        var answer: [Platform: (lastError: String, at: Int64, failing: Bool)] = [:]
        for failure in failures where answer[failure.platform] == nil {
            answer[failure.platform] = (failure.reason, failure.createdAt, false)
        }
        var seen: Set<Platform> = []
        for count in counts where count.pending == 0 && !seen.contains(count.platform) {
            seen.insert(count.platform)
            if count.success == 0, count.failure > 0 { answer[count.platform]?.failing = true }
        }
        return answer
    }
}
