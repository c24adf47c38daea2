import AuthService
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import NIOPosix
import Testing

/// Inputs that once broke a service, at the unit that now refuses them: login gate.
@Suite("hardening: login gate", .watchedForStalls)
struct LoginGateTests {
    @Test(
        "SQLite lockouts outlive the process: a new ledger on the same file still refuses; a success clears them for good"
    )
    func lockoutsSurviveRestart() async throws {
        let clock = ManualClock()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("lockout-\(UUID().uuidString).sqlite")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = try DatabaseQueue(path: path, configuration: HeraldDatabase.configuration)
        _ = try await AccountStore(db: SQLiteDatabase(first))
        let before = LoginThrottle(
            freeFailures: 3, ledger: try await KeptLockoutLedger(db: SQLiteDatabase(first), now: clock.now),
            now: clock.function)
        for _ in 0..<3 { try await before.failed("alice") }
        await #expect(throws: ServiceError.self) { try await before.check("alice") }
        try first.close()

        // "Restart": a new connection and ledger, as a new herald-auth process would open.
        let second = try DatabaseQueue(path: path, configuration: HeraldDatabase.configuration)
        let after = LoginThrottle(
            freeFailures: 3, ledger: try await KeptLockoutLedger(db: SQLiteDatabase(second), now: clock.now),
            now: clock.function)
        let refused = await #expect(throws: ServiceError.self) { try await after.check("alice") }
        #expect(refused?.code == .resourceExhausted)
        try await after.check("bob")
        clock.advance(seconds: 31)
        try await after.check("alice")
        try await after.succeeded("alice")
        #expect(try await second.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM lockout") } == 0)
    }

    @Test("the login gate refuses at once past its bound, and frees the slot when a login ends")
    func loginGateBound() throws {
        let clock = ManualClock()
        let gate = LoginGate(maxPending: 2, failureBudgetPerMinute: 100, now: clock.function)
        let first = try gate.enter()
        try gate.enter()
        #expect(
            throws: ServiceError.resourceExhausted("too many logins in progress; retry after 1 s", retryAfterSeconds: 1)
        ) {
            try gate.enter()
        }
        gate.leave(first, failed: false)
        try gate.enter()
    }

    @Test("the login gate queues fewer when hashes are slow: no login waits past its bound")
    func loginGateWait() throws {
        let gate = LoginGate(maxPending: 100, failureBudgetPerMinute: 1000, maxWaitMilliseconds: 2000, threads: 2)
        gate.leave(try gate.enter(), failed: false, hashDuration: .milliseconds(900))  // a loaded machine: 0.9 s a hash
        // Two run at once, two more finish in a second round (1.8 s); a fifth would take 2.7 s.
        for _ in 0..<4 { try gate.enter() }
        #expect(throws: ServiceError.self) { try gate.enter() }
    }

    @Test("the failed-login budget is global, refills over a minute, and says when to retry")
    func loginGateBudget() throws {
        let clock = ManualClock()
        let gate = LoginGate(maxPending: 100, failureBudgetPerMinute: 6, now: clock.function)
        for _ in 0..<6 { gate.leave(try gate.enter(), failed: true) }
        #expect(
            throws: ServiceError.resourceExhausted(
                "too many failed logins on this server; retry after 10 s", retryAfterSeconds: 10)
        ) {
            try gate.enter()
        }
        clock.advance(seconds: 10)
        gate.leave(try gate.enter(), failed: false)
    }

    @Test("one source holds at most half of the slots: a spray from one address leaves room for another")
    func loginGateShare() throws {
        let clock = ManualClock()
        let gate = LoginGate(maxPending: 8, failureBudgetPerMinute: 1000, threads: 2, now: clock.function)
        var sprayer: [LoginGate.Ticket] = []
        for _ in 0..<4 { sprayer.append(try gate.enter(from: "203.0.113.9")) }
        #expect(
            throws: ServiceError.resourceExhausted("too many logins in progress; retry after 1 s", retryAfterSeconds: 1)
        ) {
            try gate.enter(from: "203.0.113.9")
        }
        // Another address still gets in, up to the rest of the gate.
        for _ in 0..<4 { try gate.enter(from: "198.51.100.7") }
        #expect(throws: ServiceError.self) { try gate.enter(from: "192.0.2.1") }
        gate.leave(sprayer.removeLast(), failed: true)
        try gate.enter(from: "192.0.2.1")
    }

    @Test("one source spends at most half of the failed-login budget; the others keep the rest")
    func loginGateSourceBudget() throws {
        let clock = ManualClock()
        let gate = LoginGate(maxPending: 100, failureBudgetPerMinute: 10, now: clock.function)
        for _ in 0..<5 { gate.leave(try gate.enter(from: "203.0.113.9"), failed: true) }
        #expect(
            throws: ServiceError.resourceExhausted(
                "too many failed logins from this address; retry after 12 s", retryAfterSeconds: 12)
        ) {
            try gate.enter(from: "203.0.113.9")
        }
        gate.leave(try gate.enter(from: "198.51.100.7"), failed: false)
        clock.advance(seconds: 12)
        gate.leave(try gate.enter(from: "203.0.113.9"), failed: false)
    }

    @Test("sources tracked are bounded: past maxSources idle ones are forgotten, the rest share the unnamed source")
    func loginGateSourcesBounded() throws {
        let clock = ManualClock()
        let gate = LoginGate(
            maxPending: 10_000, failureBudgetPerMinute: 1_000_000, maxSources: 100, now: clock.function)
        // 100 addresses each with a failure to remember, then 1,000 more.
        for n in 0..<100 { gate.leave(try gate.enter(from: "10.0.0.\(n)"), failed: true) }
        for n in 0..<1000 { gate.leave(try gate.enter(from: "10.1.\(n / 256).\(n % 256)"), failed: false) }
        #expect(gate.trackedSources <= 100)
        // A minute later the first ones are refilled and idle: swept to make room.
        clock.advance(seconds: 61)
        let ticket = try gate.enter(from: "10.2.0.1")
        #expect(ticket.source == "10.2.0.1")
        #expect(gate.trackedSources <= 100)
        // A source of no address's length is not tracked.
        #expect(try gate.enter(from: String(repeating: "x", count: 1000)).source == "")
    }

    @Test("a login admitted but left waiting past maxWait is refused when its turn comes, not answered late")
    func loginGateStaleStart() async throws {
        let gate = LoginGate(maxPending: 8, failureBudgetPerMinute: 100, maxWaitMilliseconds: 50)
        let ticket = try gate.enter(from: "203.0.113.9")
        try gate.starting(ticket)
        try await Task.sleep(for: .milliseconds(80))
        #expect(
            throws: ServiceError.resourceExhausted(
                "login waited too long for its turn; retry after 1 s", retryAfterSeconds: 1)
        ) {
            try gate.starting(ticket)
        }
        gate.leave(ticket, failed: false)
    }

    @Test(
        "a login whose hash outlasts the answer bound is 429 by then; the hash goes on, and its verdict counts",
        .timeLimit(.minutes(1)))
    func loginAnsweredByItsBound() async throws {
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let store = try await AccountStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
        let gate = LoginGate(
            maxPending: 8, failureBudgetPerMinute: 1000, maxWaitMilliseconds: 600_000, maxAnswerMilliseconds: 100)
        let auth = try Authenticator(
            mode: .accounts, store: store, hasher: PasswordHasher(logN: 10),
            throttle: LoginThrottle(freeFailures: 1, lockout: .seconds(30)), gate: gate, hashingPool: pool)
        _ = try await auth.createUser("alice", password: "right horse")
        _ = try await auth.createUser("bob", password: "right horse")
        // The pool's one thread held, as a machine that slowed down holds it: no hash can finish.
        let held = DispatchSemaphore(value: 0)
        pool.submit { _ in held.wait() }
        let busy = ServiceError.resourceExhausted("login still being checked; retry after 1 s", retryAfterSeconds: 1)
        await #expect(throws: busy) { try await auth.authenticate(AuthTests.basic("alice:right horse")) }
        await #expect(throws: busy) { try await auth.authenticate(AuthTests.basic("bob:wrong")) }
        #expect(gate.pending == 2)
        held.signal()
        let deadline = ContinuousClock.now + .seconds(30)
        while gate.pending > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(gate.pending == 0, "the hashes went on after their callers were answered")
        // Alice's verdict was remembered: her retry needs no hash (the thread is held again).
        pool.submit { _ in held.wait() }
        #expect(try await auth.authenticate(AuthTests.basic("alice:right horse")).user == "alice")
        held.signal()
        // Bob's failure was counted: with one free failure, he is locked out.
        let locked = await #expect(throws: ServiceError.self) {
            try await auth.authenticate(AuthTests.basic("bob:right horse"))
        }
        #expect(locked?.message.contains("too many failed logins for this user") == true)
        try await pool.shutdownGracefully()
    }

    @Test(
        "a spray of made-up names from a user's own address costs no hash, slot or budget: the user's first login gets in; the names are answered 401 as wrong passwords are"
    )
    func sprayOfUnknownNames() async throws {
        let store = try await AccountStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
        let auth = try Authenticator(
            mode: .accounts, store: store, hasher: PasswordHasher(logN: 14),
            // Two slots and a budget of 4 failures a minute (2 per address): before, the spray's first
            // failures spent the address's share and every login from it was refused.
            gate: LoginGate(maxPending: 2, failureBudgetPerMinute: 4, maxWaitMilliseconds: 600_000),
            credentialCache: .zero)
        _ = try await auth.createUser("alice", password: "correct horse")
        let address = "198.51.100.7"
        let codes = await withTaskGroup(of: StatusCode?.self) { group in
            for index in 0..<50 {
                group.addTask {
                    await statusCode {
                        try await auth.authenticate(AuthTests.basic("spray\(index):guess-\(index)"), from: address)
                    }
                }
            }
            return await group.reduce(into: [StatusCode?]()) { $0.append($1) }
        }
        #expect(codes.allSatisfy { $0 == .unauthenticated }, "\(codes)")
        #expect(auth.gate.pending == 0)
        // The user, from the same address, right after: in at the first try.
        let alice = AuthTests.basic("alice:correct horse")
        #expect(try await auth.authenticate(alice, from: address).user == "alice")
        // Wrong passwords for a real name still spend the address's share (2): then every login from
        // it is refused alike, a made-up name's as a real one's, so the status tells nothing.
        for _ in 0..<2 {
            #expect(
                await statusCode { try await auth.authenticate(AuthTests.basic("alice:wrong"), from: address) }
                    == .unauthenticated)
        }
        let real = await statusCode { try await auth.authenticate(alice, from: address) }
        let madeUp = await statusCode { try await auth.authenticate(AuthTests.basic("nobody:x"), from: address) }
        #expect(
            real == .resourceExhausted && madeUp == .resourceExhausted,
            "\(String(describing: real)) \(String(describing: madeUp))")
    }

    @Test("a made-up name waits about as long as a hash takes now, and longer behind hashes in progress")
    func decoyDelay() {
        let gate = LoginGate(maxPending: 8, failureBudgetPerMinute: 600, threads: 2)
        gate.record(hashDuration: .milliseconds(100))
        let idle = gate.decoyDelay()
        #expect(idle >= .milliseconds(85) && idle <= .milliseconds(115), "\(idle)")
        let tickets = (0..<4).compactMap { _ in try? gate.enter() }
        #expect(tickets.count == 4)
        let busy = gate.decoyDelay()
        #expect(busy >= .milliseconds(255) && busy <= .milliseconds(345), "4 hashes on 2 threads ahead: \(busy)")
        for ticket in tickets { gate.leave(ticket, failed: false) }
    }
}
