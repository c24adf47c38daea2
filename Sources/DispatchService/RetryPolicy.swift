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
