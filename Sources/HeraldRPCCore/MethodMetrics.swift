import HeraldModel
public import Metrics
import Synchronization

/// A counter and a timer per key, made on first use and kept: making swift-metrics handles per
/// event costs the factory's name checks and look-ups every time. Used per RPC method (by status)
/// and by the edge (per route, method and status).
public final class CounterAndTimerByKey<Key: Hashable & Sendable>: Sendable {
    private let made = Mutex<[Key: (count: Metrics.Counter, duration: Metrics.Timer)]>([:])

    public init() {}

    /// Counts one event of `key` that took `nanoseconds`; `make` builds the key's two handles the
    /// first time it is seen.
    public func record(_ key: Key, nanoseconds: Int64, make: () -> (count: Metrics.Counter, duration: Metrics.Timer)) {
        let metrics = made.withLock { made in
            if let metrics = made[key] { return metrics }
            let metrics = make()
            made[key] = metrics
            return metrics
        }
        metrics.count.increment()
        metrics.duration.recordNanoseconds(nanoseconds)
    }
}

/// RPC metrics of one method, made once at registration so a call pays two updates and no look-up.
final class MethodMetrics: Sendable {
    private let method: String
    /// Count and latency by status code, made on first use (most methods only ever see a few codes).
    private let byStatus = CounterAndTimerByKey<StatusCode>()

    init(method: String) {
        self.method = method
    }

    func record(status: StatusCode, since start: ContinuousClock.Instant) {
        byStatus.record(status, nanoseconds: (ContinuousClock.now - start).wholeNanoseconds) {
            let dimensions = [("method", method), ("status", status.description)]
            return (
                Metrics.Counter(label: "herald_rpc_requests_total", dimensions: dimensions),
                Metrics.Timer(label: "herald_rpc_duration_seconds", dimensions: dimensions)
            )
        }
    }
}
