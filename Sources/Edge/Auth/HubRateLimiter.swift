import HTTPTypes
import HeraldModel
import Metrics
import Synchronization

/// Each hub's API request rate at this edge: a token bucket per hub, holding `burst`
/// requests (one second's worth when 0) and refilled at `requests_per_second`, as herald-auth's
/// verdict for the request carries them (so a change holds at the next request, with the verdict
/// cache's generation). A request beyond it is 429 with `Retry-After`: NH's XML on NH's routes,
/// Herald's JSON on the others. Only requests whose credentials herald-auth accepted are counted,
/// so a stranger cannot spend a hub's rate.
///
/// Replicas: each edge enforces `1/hub-rate-share` of the rate and of the burst, with no shared
/// state: nothing to ask per request, at the price of a caller whose requests reach one replica
/// more than the others being throttled before the hub's whole rate is used (a load balancer that
/// spreads evenly keeps that small).
public final class HubRateLimiter: Sendable {
    /// Edge replicas the rate is shared among.
    let share: Int64
    private let buckets = Mutex<[String: Bucket]>([:])
    private let clock: @Sendable () -> ContinuousClock.Instant
    /// Hubs are operator-created, and only a hub herald-auth answered for gets a bucket; past this
    /// many (a deployment deleting and making hubs for years) the buckets start over, full.
    static let capacity = 100_000

    struct Bucket {
        var tokens: Double
        var at: ContinuousClock.Instant
        /// Requests refused since the bucket was made (the console shows it).
        var refused: Int64 = 0
    }

    public init(share: Int = 1, clock: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.share = Int64(max(1, share))
        self.clock = clock
    }

    /// Takes one request of `hub`'s bucket; nil when admitted, else the whole seconds to wait (at
    /// least 1) until one is there.
    func take(hub: String, rate: RequestRate) -> Int? {
        guard rate.perSecond > 0 else { return nil }
        let perSecond = max(1, Double(min(rate.perSecond, RequestRate.maxPerSecond)) / Double(share))
        let burst = min(rate.burst > 0 ? rate.burst : rate.perSecond, RequestRate.maxPerSecond)
        let size = max(1, Double(burst) / Double(share))
        let now = clock()
        return buckets.withLock { buckets -> Int? in
            if buckets.count >= Self.capacity, buckets[hub] == nil { buckets.removeAll(keepingCapacity: true) }
            var bucket = buckets[hub] ?? Bucket(tokens: size, at: now)
            let since = (now - bucket.at).components
            let elapsed = max(0, Double(since.seconds) + Double(since.attoseconds) / 1e18)
            bucket.tokens = min(size, bucket.tokens + elapsed * perSecond)
            bucket.at = now
            defer { buckets[hub] = bucket }
            guard bucket.tokens >= 1 else {
                bucket.refused &+= 1
                let wait = ((1 - bucket.tokens) / perSecond).rounded(.up)
                return Int(min(max(wait, 1), 3600))
            }
            bucket.tokens -= 1
            return nil
        }
    }

    /// Requests of `hub` (its id) this edge refused for its rate since it started (the console's
    /// figure; the metric is `herald_edge_throttled_requests_total`).
    func refused(hub: String) -> Int64 {
        buckets.withLock { $0[hub]?.refused ?? 0 }
    }

    /// 429 with `Retry-After` unless `hub` (its id) may make one more request at `rate`.
    func admit(hub: String, rate: RequestRate) throws {
        guard let wait = take(hub: hub, rate: rate) else { return }
        Counter(label: "herald_edge_throttled_requests_total", dimensions: [("hub", hub)]).increment()
        throw EdgeError(
            .tooManyRequests,
            "the hub's request rate (\(rate.perSecond) a second) is spent; retry after \(wait) s",
            headers: [.retryAfter: String(wait)])
    }
}
