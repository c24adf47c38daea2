import HeraldModel
import HeraldTestSupport
import Synchronization
import Testing

@testable import Edge

/// Each hub's request rate at the edge, a token bucket per hub.
@Suite("hub request rate: a token bucket per hub", .watchedForStalls)
struct HubRateLimiterTests {
    final class Clock: Sendable {
        let now = Mutex(ContinuousClock.now)
        func advance(_ by: Duration) { now.withLock { $0 += by } }
    }

    @Test("a burst, then the rate; Retry-After until the next token; other hubs untouched")
    func bucket() {
        let clock = Clock()
        let limiter = HubRateLimiter(clock: { clock.now.withLock { $0 } })
        let rate = RequestRate(perSecond: 2, burst: 5)
        for _ in 0..<5 { #expect(limiter.take(hub: "a", rate: rate) == nil) }
        #expect(limiter.take(hub: "a", rate: rate) == 1, "the sixth waits for the next token: half a second, as 1 s")
        #expect(limiter.take(hub: "b", rate: rate) == nil, "another hub has its own bucket")
        #expect(limiter.take(hub: "a", rate: RequestRate()) == nil, "no rate: no limit")
        clock.advance(.milliseconds(500))
        #expect(limiter.take(hub: "a", rate: rate) == nil)
        #expect(limiter.take(hub: "a", rate: rate) != nil)
        clock.advance(.seconds(60))
        for _ in 0..<5 { #expect(limiter.take(hub: "a", rate: rate) == nil) }
        #expect(limiter.take(hub: "a", rate: rate) != nil, "the bucket holds the burst, no more")
        #expect(limiter.refused(hub: "a") == 3 && limiter.refused(hub: "b") == 0, "the console's count")
        #expect(limiter.refused(hub: "unknown") == 0)
    }

    @Test("a slow rate's Retry-After says how long; a burst of 0 is one second's worth")
    func retryAfter() {
        let clock = Clock()
        let limiter = HubRateLimiter(clock: { clock.now.withLock { $0 } })
        let slow = RequestRate(perSecond: 1, burst: 1)
        #expect(limiter.take(hub: "a", rate: slow) == nil)
        #expect(limiter.take(hub: "a", rate: slow) == 1)
        let tenASecond = RequestRate(perSecond: 10)
        for _ in 0..<10 { #expect(limiter.take(hub: "b", rate: tenASecond) == nil) }
        #expect(limiter.take(hub: "b", rate: tenASecond) == 1)
        // Hostile values are bounded, not trapped on.
        #expect(limiter.take(hub: "c", rate: RequestRate(perSecond: .max, burst: .max)) == nil)
    }

    @Test("replicas: each edge enforces its share of the rate and the burst")
    func share() {
        let clock = Clock()
        let limiter = HubRateLimiter(share: 2, clock: { clock.now.withLock { $0 } })
        let rate = RequestRate(perSecond: 10, burst: 10)
        for _ in 0..<5 { #expect(limiter.take(hub: "a", rate: rate) == nil) }
        #expect(limiter.take(hub: "a", rate: rate) == 1)
        clock.advance(.milliseconds(200))
        #expect(limiter.take(hub: "a", rate: rate) == nil, "5 a second here: one token in 200 ms")
    }

    @Test("admit: 429 with Retry-After and a message")
    func admit() throws {
        let limiter = HubRateLimiter()
        try limiter.admit(hub: "a", rate: RequestRate(perSecond: 1, burst: 1))
        let error = #expect(throws: EdgeError.self) {
            try limiter.admit(hub: "a", rate: RequestRate(perSecond: 1, burst: 1))
        }
        #expect(error?.status == .tooManyRequests && error?.headers[.retryAfter] == "1")
    }
}
