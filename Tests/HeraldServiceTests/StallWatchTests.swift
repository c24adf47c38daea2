import Foundation
import HeraldTestSupport
import NIOCore
import NIOPosix
import Testing

/// The stall watch every suite runs under, over a group of its own stalled on purpose (the shared
/// one's loops serve every test in the process).
@Suite("the stall watch", .watchedForStalls)
struct StallWatchTests {
    @Test("a loop held for over a second is a stall that names the tests it fell in; a loop that ticks has none")
    func namesTheStall() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let watch = StallWatch(group, watchesPool: false)
        let quiet = watch.begin("quiet")
        // Ticks while nothing holds the loop.
        // (A busy machine may run a tick late by a little: nothing near the failure threshold.)
        #expect(await eventually { watch.report().contains("event loop 0: ") })
        #expect(await watch.end(quiet).isEmpty)
        let held = watch.begin("held")
        // A blocking call on the loop, as a synchronous database call or a process wait would be.
        try await group.next().submit { usleep(1_300_000) }.get()
        let stalls = await watch.end(held)
        let stall = try #require(stalls.first)
        #expect(stalls.count == 1)
        #expect(stall.clock == "event loop 0" && stall.duration > StallWatch.failureThreshold)
        #expect(stall.tests == ["held"])
        #expect(watch.report().contains("over 1.000 s"))
        #expect(watch.report().contains("event loop 0 at +"))
        // A test that began after the stall ended sees none of it.
        let after = watch.begin("after")
        #expect(await watch.end(after).isEmpty)
        try await group.shutdownGracefully()
    }
}
