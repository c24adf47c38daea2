import Foundation
import HeraldModel
import HeraldRPC
import HeraldTestSupport
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@testable import HeraldService

/// The background services every process runs beside its RPCs: housekeeping that never stops the
/// process, the health probe that turns a failing database into NOT_SERVING and back, and the
/// disk-space gauge.
@Suite("background services", .timeLimit(.minutes(2)), .watchedForStalls)
struct BackgroundTests {
    /// Polls `condition` until it holds or `timeout` passes: no sleep stands in for an event.
    static func eventually(_ timeout: Duration = .seconds(30), _ condition: () -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            if ContinuousClock.now > deadline { return false }
            try await Task.sleep(for: .milliseconds(5))
        }
        return true
    }

    /// Runs `service` in a service group until `body` returns, then shuts the group down
    /// gracefully and waits for it.
    static func running(_ service: any Service, _ body: () async throws -> Void) async throws {
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: service)], logger: Logger(label: "test")))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            do { try await body() } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    @Test("a periodic job runs again after it fails, and stops at graceful shutdown")
    func periodic() async throws {
        let runs = Mutex(0)
        let job = Periodic("test job", every: .milliseconds(10), logger: Logger(label: "test")) {
            let n = runs.withLock { count in
                count += 1
                return count
            }
            struct Refused: Error {}
            if n.isMultiple(of: 2) { throw Refused() }
        }
        try await Self.running(job) {
            let ranOn = try await Self.eventually { runs.withLock { $0 } >= 5 }
            #expect(ranOn, "stopped after a failure")
        }
        // Once the group has returned, the job runs no more.
        let stopped = runs.withLock { $0 }
        try await Task.sleep(for: .milliseconds(50))
        #expect(runs.withLock { $0 } == stopped)
    }

    @Test("a job that throws CancellationError ends its service rather than being logged as failing")
    func cancelled() async throws {
        let runs = Mutex(0)
        let job = Periodic("cancelled job", every: .milliseconds(1), logger: Logger(label: "test")) {
            runs.withLock { $0 += 1 }
            throw CancellationError()
        }
        // The group's single service returning ends the group: run() returns without a shutdown.
        let ended = Task { try await job.run() }
        try await ended.value
        #expect(runs.withLock { $0 } == 1)
    }

    @Test("the health probe: a failing check makes the process NOT_SERVING, and SERVING again once it passes")
    func probe() async throws {
        let health = HealthReporter()
        health.track([""])
        health.setCondition("listening", true)
        let failing = Mutex(false)
        let check = HealthCheck("database") {
            struct DiskGone: Error {}
            if failing.withLock({ $0 }) { throw DiskGone() }
        }
        let probe = HealthProbe(
            health: health, checks: [check], interval: .milliseconds(10), logger: Logger(label: "test"))
        try await Self.running(probe) {
            let serving = try await Self.eventually { health.status(of: "") == .serving }
            #expect(serving)
            failing.withLock { $0 = true }
            let notServing = try await Self.eventually { health.status(of: "") == .notServing }
            #expect(notServing && health.failingConditions == ["database"])
            failing.withLock { $0 = false }
            let again = try await Self.eventually { health.status(of: "") == .serving }
            #expect(again && health.failingConditions.isEmpty)
        }
    }

    @Test("disk space: the share of the data folder's filesystem left to users, or nothing when it cannot be read")
    func diskSpace() throws {
        let sample = try #require(DiskSpaceGauge.sample(NSTemporaryDirectory()))
        #expect(sample.free > 0 && (0...1).contains(sample.ratio))
        #expect(DiskSpaceGauge.sample("/no/such/folder/\(UUID())") == nil)
    }
}
