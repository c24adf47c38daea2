import HeraldModel
import Metrics
import Synchronization

/// RPC metrics of one method, made once at registration so a call pays two updates and no look-up.
final class MethodMetrics: Sendable {
    private let method: String
    /// Count and latency by status code, made on first use (most methods only ever see a few codes).
    private let byStatus = Mutex<[StatusCode: (count: Metrics.Counter, duration: Metrics.Timer)]>([:])

    init(method: String) {
        self.method = method
    }

    func record(status: StatusCode, since start: ContinuousClock.Instant) {
        let elapsed = (ContinuousClock.now - start).wholeNanoseconds
        let metrics = byStatus.withLock { byStatus in
            if let metrics = byStatus[status] { return metrics }
            let dimensions = [("method", method), ("status", status.description)]
            let metrics = (
                Metrics.Counter(label: "herald_rpc_requests_total", dimensions: dimensions),
                Metrics.Timer(label: "herald_rpc_duration_seconds", dimensions: dimensions)
            )
            byStatus[status] = metrics
            return metrics
        }
        metrics.count.increment()
        metrics.duration.recordNanoseconds(elapsed)
    }
}
