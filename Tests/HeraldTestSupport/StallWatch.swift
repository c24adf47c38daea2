import Foundation
import NIOCore
import NIOPosix
import Synchronization
public import Testing

/// A watchdog over what every test in a process shares: each of NIO's singleton event loops and
/// Swift Concurrency's cooperative pool. A repeating timer on each loop, and a task on the pool,
/// note how much later than asked they run, less the time their thread only waited for a core
/// (Linux's schedstat: on a loaded machine every thread waits, and that is load, not a fault);
/// what is left is a stall of that clock, something that held its thread (a blocking call, a
/// lock wait, a long CPU loop).
///
/// Every suite carries the ``Trait/watchedForStalls`` trait (scripts/format.sh checks that each
/// top-level suite does): it starts the watch, and a test during which a clock stalled for longer
/// than ``failureThreshold`` records an issue naming the clock, the stall and every test that ran
/// meanwhile. When the process exits, it prints its worst stalls with the tests they fell in.
public final class StallWatch: Sendable {
    /// A stall longer than this fails every test it falls in.
    public static let failureThreshold: Duration = .seconds(1)
    /// How often each clock ticks; a tick later than this by `recordThreshold` is a stall.
    static let interval: Duration = .milliseconds(100)
    static let recordThreshold: Duration = .milliseconds(100)
    /// How many of the worst stalls the report lists, and the bounds on what is kept, whatever a
    /// run does: the watch must never be what stalls (every clock's tick takes its lock).
    static let reported = 10
    static let keptLong = 1000
    static let keptWindows = 50_000

    public static let shared = StallWatch(MultiThreadedEventLoopGroup.singleton, watchesPool: true)

    let group: any EventLoopGroup
    let watchesPool: Bool

    /// A watch over `group`'s loops (and the cooperative pool, with `watchesPool`). The tests use
    /// ``shared``; one of its own watches a group of its own, to be stalled on purpose.
    public init(_ group: any EventLoopGroup, watchesPool: Bool) {
        self.group = group
        self.watchesPool = watchesPool
    }

    public struct Stall: Sendable {
        public var clock: String
        var start: ContinuousClock.Instant
        var end: ContinuousClock.Instant
        /// The tests that ran during it (kept only for the stalls that are reported).
        public var tests: [String] = []
        public var duration: Duration { end - start }
    }

    struct Window: Sendable {
        var name: String
        var start: ContinuousClock.Instant
        var end: ContinuousClock.Instant
    }

    struct Clock: Sendable {
        var last = ContinuousClock.now
        var ticks = 0
        var stalls = 0
        var worst: Stall?
        var lastStall: Stall?
    }

    struct State: Sendable {
        var started = false
        var running: [UInt64: (name: String, start: ContinuousClock.Instant)] = [:]
        /// Finished tests in the order they ended.
        var finished: [Window] = []
        var nextWindow: UInt64 = 0
        var tests = 0
        var clocks: [String: Clock] = [:]
        /// The worst stalls, longest first.
        var worst: [Stall] = []
        /// Every stall over the failure threshold (the tests it fell in fail).
        var long: [Stall] = []
        /// Each event loop's thread, as its ticks found it.
        var threads: [String: Int32] = [:]
        /// The (stall, test) pairs that failed a test already.
        var failed: Set<String> = []

        /// The tests running now or ended since `instant`: cheap (the finished ones are read back
        /// from the newest), and called only for a stall that is kept with its tests.
        func tests(since instant: ContinuousClock.Instant) -> [String] {
            var names = running.values.map(\.name)
            for window in finished.reversed() {
                guard window.end >= instant else { break }
                names.append(window.name)
            }
            return names
        }
    }

    let state = Mutex(State())
    let origin = ContinuousClock.now

    /// Starts the timers once (and, for ``shared``, the report at exit).
    func start() {
        let first = state.withLock { state in
            defer { state.started = true }
            return !state.started
        }
        guard first else { return }
        for (index, loop) in group.makeIterator().enumerated() {
            watch(loop, name: "event loop \(index)")
        }
        guard watchesPool else { return }
        if let folder = ProcessInfo.processInfo.environment["HERALD_STALL_BACKTRACES"] { backtraces(into: folder) }
        // At high priority: it waits for a thread to come free, not behind every test's queued
        // work (a long queue is load; a thread held is a stall).
        Task.detached(priority: .high) { await self.watchPool() }
        atexit { FileHandle.standardError.write(Data(StallWatch.shared.report().utf8)) }
    }

    /// How long a thread has been runnable and waiting for a core, in nanoseconds (the second
    /// field of Linux's schedstat); nil where the kernel does not say. A tick's lateness less
    /// this is what held the clock's thread: it ran something, or blocked; time it only waited for
    /// a core (a loaded machine, not a held thread) is not a stall.
    static func queued(_ thread: Int32 = StallWatch.currentThread()) -> Int64? {
        let fd = open("/proc/self/task/\(thread)/schedstat", O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 96)
        let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, 95) }
        guard count > 0 else { return nil }
        let fields = String(decoding: bytes[0..<count], as: UTF8.self).split(separator: " ")
        return fields.count >= 2 ? Int64(fields[1]) : nil
    }

    /// The calling thread's kernel id, from /proc/thread-self ("<pid>/task/<tid>"; Swift's Glibc
    /// shows neither gettid nor syscall).
    static func currentThread() -> Int32 {
        var bytes = [CChar](repeating: 0, count: 64)
        let count = readlink("/proc/thread-self", &bytes, 63)
        guard count > 0 else { return getpid() }
        let path = String(decoding: bytes[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return path.split(separator: "/").last.flatMap { Int32($0) } ?? getpid()
    }

    /// `late` less the time a thread waited for a core between two readings of ``queued(_:)``.
    static func held(_ late: Duration, queued before: Int64?, _ after: Int64?) -> Duration {
        guard let before, let after else { return late }
        return max(.zero, late - .nanoseconds(max(0, after - before)))
    }

    private func watch(_ loop: any EventLoop, name: String, queued before: Int64? = nil) {
        // Ends with its group's shutdown (the scheduling then fails).
        let asked = NIODeadline.now() + .milliseconds(Int64(Self.interval / .milliseconds(1)))
        loop.scheduleTask(deadline: asked) {
            let late = Duration.nanoseconds((NIODeadline.now() - asked).nanoseconds)
            let thread = Self.currentThread()
            // One reading ends this tick's window and starts the next one's.
            let now = Self.queued(thread)
            self.tick(name, late: Self.held(late, queued: before, now))
            self.state.withLock { $0.threads[name] = thread }
            self.watch(loop, name: name, queued: now)
        }
    }

    private func watchPool() async {
        while true {
            // The thread it slept on stands for the pool's: all of them share the same cores.
            let thread = Self.currentThread()
            let before = Self.queued(thread)
            let asked = ContinuousClock.now + Self.interval
            do { try await Task.sleep(until: asked, clock: .continuous) } catch { return }
            tick("cooperative pool", late: Self.held(ContinuousClock.now - asked, queued: before, Self.queued(thread)))
        }
    }

    /// With `HERALD_STALL_BACKTRACES=<folder>` (for finding a stall's cause; it pauses the
    /// process, so never in CI): a thread that, while a clock is more than a second behind (or
    /// `HERALD_STALL_BACKTRACE_AFTER_MS`), has
    /// gdb write every thread's stack to that folder, eight times at most.
    private func backtraces(into folder: String) {
        // HERALD_STALL_BACKTRACE_AFTER_MS: how far behind a clock must be (1,000 unless given).
        let after = Duration.milliseconds(
            Int(ProcessInfo.processInfo.environment["HERALD_STALL_BACKTRACE_AFTER_MS"] ?? "") ?? 1000)
        Thread {
            var written = 0
            while written < 8 {
                Thread.sleep(forTimeInterval: 0.05)
                let behind = self.state.withLock { state in
                    state.clocks.filter { ContinuousClock.now - $0.value.last > after }.keys.sorted()
                }
                guard !behind.isEmpty, let gdb = which("gdb") else { continue }
                written += 1
                let file = "\(folder)/stall-\(getpid())-\(written).txt"
                let header =
                    "behind: \(behind.joined(separator: ", ")) at +\(Self.seconds(ContinuousClock.now - self.origin))\n"
                FileManager.default.createFile(atPath: file, contents: Data(header.utf8))
                _ = try? runProgramBlocking(
                    "/bin/sh", ["-c", "\(gdb) -p \(getpid()) -batch -ex 'thread apply all bt 40' >> \(file) 2>&1"])
                Thread.sleep(forTimeInterval: 2)
            }
        }.start()
    }

    /// One tick of clock `name`, `late` behind what it asked, seen `ago` before now.
    private func tick(_ name: String, late: Duration, ago: Duration = .zero) {
        let now = ContinuousClock.now - ago
        state.withLock { state in
            state.clocks[name, default: Clock()].ticks += 1
            state.clocks[name]?.last = now
            guard late >= Self.recordThreshold else { return }
            var stall = Stall(clock: name, start: now - late, end: now)
            // The same stall seen twice (a test's end measures the loops too) counts once.
            if let last = state.clocks[name]?.lastStall, stall.start <= last.end,
                stall.end >= last.start - Self.interval
            {
                guard stall.duration > last.duration else { return }
            } else {
                state.clocks[name, default: Clock()].stalls += 1
            }
            state.clocks[name]?.lastStall = stall
            let worstOfClock = late > (state.clocks[name]?.worst?.duration ?? .zero)
            let worstOfAll = state.worst.count < Self.reported || late > (state.worst.last?.duration ?? .zero)
            let long = late > Self.failureThreshold && state.long.count < Self.keptLong
            guard worstOfClock || worstOfAll || long else { return }
            stall.tests = state.tests(since: stall.start)
            if worstOfClock { state.clocks[name]?.worst = stall }
            if worstOfAll {
                state.worst.removeAll { $0.clock == name && $0.start <= stall.end && $0.end >= stall.start }
                let at = state.worst.firstIndex { $0.duration < late } ?? state.worst.endIndex
                state.worst.insert(stall, at: at)
                if state.worst.count > Self.reported { state.worst.removeLast() }
            }
            if long {
                state.long.removeAll { $0.clock == name && $0.start <= stall.end && $0.end >= stall.start }
                state.long.append(stall)
            }
        }
    }

    public func begin(_ name: String) -> UInt64 {
        start()
        return state.withLock { state in
            defer { state.nextWindow += 1 }
            state.running[state.nextWindow] = (name, .now)
            state.tests += 1
            return state.nextWindow
        }
    }

    /// Ends a test's window; the stalls over the failure threshold that fell in it.
    ///
    /// A parameterized test's cases each end a window of their own; a stall is returned once per
    /// `test` (the first of its cases to end), so that one stall fails each test once.
    public func end(_ id: UInt64, test: String? = nil) async -> [Stall] {
        // A stall still under way as the test ends shows when each loop runs a task again.
        // Timed on the loop: the wait for this task to resume after it is the pool's, not the loop's.
        for (index, loop) in group.makeIterator().enumerated() {
            let name = "event loop \(index)"
            guard let thread = state.withLock({ $0.threads[name] }) else { continue }
            let before = Self.queued(thread)
            let asked = NIODeadline.now()
            guard let ran = try? await loop.submit({ NIODeadline.now() }).get() else { continue }
            let late = Self.held(.nanoseconds((ran - asked).nanoseconds), queued: before, Self.queued(thread))
            let ago = Duration.nanoseconds((NIODeadline.now() - ran).nanoseconds)
            if late >= Self.recordThreshold { tick(name, late: late, ago: ago) }
        }
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let (name, start) = state.running.removeValue(forKey: id) else { return [] }
            if state.finished.count >= Self.keptWindows { state.finished.removeFirst(state.finished.count / 2) }
            state.finished.append(Window(name: name, start: start, end: now))
            let fell = state.long.filter { $0.end >= start && $0.start <= now }
            guard let test else { return fell }
            return fell.filter { state.failed.insert("\($0.clock) \($0.start) \(test)").inserted }
        }
    }

    static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        return "\(milliseconds / 1000).\(String(format: "%03d", milliseconds % 1000)) s"
    }

    static func names(_ tests: [String]) -> String {
        guard !tests.isEmpty else { return "no test" }
        let sorted = Set(tests).sorted()
        let shown = sorted.prefix(4).joined(separator: "; ")
        return sorted.count > 4 ? "\(shown); and \(sorted.count - 4) more" : shown
    }

    func describe(_ stall: Stall) -> String {
        "\(Self.seconds(stall.duration)) \(stall.clock) at +\(Self.seconds(stall.start - origin)), during \(Self.names(stall.tests))"
    }

    /// The worst stalls of this process, per clock and overall, with the tests they fell in.
    public func report() -> String {
        let state = state.withLock { $0 }
        let total = state.clocks.values.reduce(0) { $0 + $1.stalls }
        var lines = [
            "stall watch (pid \(getpid())): \(state.clocks.count) clocks ticking every \(Self.seconds(Self.interval)) through \(state.tests) tests; \(total) stalls of \(Self.seconds(Self.recordThreshold)) or more, \(state.long.count) over \(Self.seconds(Self.failureThreshold))"
        ]
        for (name, clock) in state.clocks.sorted(by: { $0.key < $1.key }) {
            lines.append(
                "stall watch:   \(name): \(clock.ticks) ticks, \(clock.stalls) stalls, the worst "
                    + (clock.worst.map { describe($0) } ?? "none"))
        }
        if !state.worst.isEmpty { lines.append("stall watch: the worst \(state.worst.count):") }
        for stall in state.worst { lines.append("stall watch:   \(describe(stall))") }
        return lines.joined(separator: "\n") + "\n"
    }
}

/// The trait behind ``Trait/watchedForStalls``.
public struct StallWatchTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    @TaskLocal static var watching = false

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // A nested suite that carries the trait too is watched once.
        guard !Self.watching, !test.isSuite else { return try await function() }
        let name = Self.name(of: test)
        let watch = StallWatch.shared
        let window = watch.begin(name)
        var thrown: (any Error)?
        do {
            try await Self.$watching.withValue(true) { try await function() }
        } catch {
            thrown = error
        }
        for stall in await watch.end(window, test: "\(test.id)") {
            Issue.record(
                "\(stall.clock) stalled for \(StallWatch.seconds(stall.duration)) during this test (a blocking call, a lock wait or a long CPU loop on it); tests running then: \(StallWatch.names(stall.tests))",
                sourceLocation: test.sourceLocation)
        }
        if let thrown { throw thrown }
    }

    /// The suite's name (its display name where it has one) and the test's.
    static func name(of test: Test) -> String {
        "\(test.id.nameComponents.joined(separator: "."))/\(test.displayName ?? test.name)"
    }
}

extension Trait where Self == StallWatchTrait {
    /// Watches NIO's event loops and the cooperative pool while each test of the suite runs, and
    /// fails a test during which one stalled for over a second (``StallWatch``).
    public static var watchedForStalls: Self { StallWatchTrait() }
}
