/// Where deliveries of one platform go: ``APNsSender``, ``FCMSender``, ``WNSSender``,
/// ``WebPushSender``, or ``InboxProvider`` when no credentials are configured.
public protocol PushSender: Sendable {
    /// Delivers a batch; returns one result per item, in order. Never throws: a failure is a
    /// result (retry or failed), so one bad delivery cannot fail its batch.
    func send(_ items: [PushItem]) async -> [PushResult]
}

/// A sender that speaks to its service one request per delivery, many at a time.
public protocol SingleRequestSender: PushSender {
    /// How many requests of one batch may be in flight together.
    var concurrency: Int { get }
    func send(_ item: PushItem) async -> PushResult
}

extension SingleRequestSender {
    public func send(_ items: [PushItem]) async -> [PushResult] {
        await withTaskGroup(of: (Int, PushResult).self) { group in
            var results = [PushResult](
                repeating: .retry(status: 0, reason: "NotAttempted", after: nil), count: items.count)
            var next = 0
            func start(_ index: Int) {
                group.addTask { (index, await self.send(items[index])) }
            }
            while next < min(concurrency, items.count) {
                start(next)
                next += 1
            }
            while let (index, result) = await group.next() {
                results[index] = result
                if next < items.count {
                    start(next)
                    next += 1
                }
            }
            return results
        }
    }
}
