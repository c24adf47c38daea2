import AuthService
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
import Testing

/// Inputs that once broke a service (issue 12), at the unit that now refuses them: login gate.
@Suite("hardening: login gate")
struct LoginGateTests {
    @Test("SQLite lockouts outlive the process: a new ledger on the same file still refuses; a success clears them for good")
    func lockoutsSurviveRestart() async throws {
        let clock = ManualClock()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("lockout-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = try DatabaseQueue(path: path)
        try SQLiteAccountStore.migrator.migrate(first)
        let before = LoginThrottle(freeFailures: 3, ledger: try SQLiteLockoutLedger(db: first, now: clock.now), now: clock.function)
        for _ in 0..<3 { try await before.failed("alice") }
        await #expect(throws: ServiceError.self) { try await before.check("alice") }
        try first.close()

        // "Restart": a new connection and ledger, as a new herald-auth process would open.
        let second = try DatabaseQueue(path: path)
        let after = LoginThrottle(freeFailures: 3, ledger: try SQLiteLockoutLedger(db: second, now: clock.now), now: clock.function)
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
        try gate.enter()
        try gate.enter()
        #expect(throws: ServiceError.resourceExhausted("too many logins in progress; retry after 1 s", retryAfterSeconds: 1)) {
            try gate.enter()
        }
        gate.leave(failed: false)
        try gate.enter()
    }

    @Test("the login gate queues fewer when hashes are slow: no login waits past its bound")
    func loginGateWait() throws {
        let gate = LoginGate(maxPending: 100, failureBudgetPerMinute: 1000, maxWaitMilliseconds: 2000, threads: 2)
        try gate.enter()
        gate.leave(failed: false, hashDuration: .milliseconds(900))  // a loaded machine: 0.9 s a hash
        // Two run at once, two more finish in a second round (1.8 s); a fifth would take 2.7 s.
        for _ in 0..<4 { try gate.enter() }
        #expect(throws: ServiceError.self) { try gate.enter() }
    }

    @Test("the failed-login budget is global, refills over a minute, and says when to retry")
    func loginGateBudget() throws {
        let clock = ManualClock()
        let gate = LoginGate(maxPending: 100, failureBudgetPerMinute: 6, now: clock.function)
        for _ in 0..<6 {
            try gate.enter()
            gate.leave(failed: true)
        }
        #expect(throws: ServiceError.resourceExhausted("too many failed logins on this server; retry after 10 s", retryAfterSeconds: 10)) {
            try gate.enter()
        }
        clock.advance(seconds: 10)
        try gate.enter()
        gate.leave(failed: false)
    }

    @Test("a spray of logins with unknown names is refused at once past the bound; a cached login still works")
    func spray() async throws {
        let store = try SQLiteAccountStore(db: DatabaseQueue())
        let auth = try Authenticator(
            mode: .accounts, store: store, hasher: PasswordHasher(logN: 14), gate: LoginGate(maxPending: 2, failureBudgetPerMinute: 1000))
        _ = try await auth.createUser("alice", password: "correct horse")
        let alice = AuthTests.basic("alice:correct horse")
        _ = try await auth.authenticate(alice)  // now cached
        let codes = await withTaskGroup(of: StatusCode?.self) { group in
            for index in 0..<50 {
                group.addTask { await AuthTests.code { try await auth.authenticate(AuthTests.basic("spray\(index):guess-\(index)")) } }
            }
            return await group.reduce(into: [StatusCode?]()) { $0.append($1) }
        }
        #expect(codes.allSatisfy { $0 == .unauthenticated || $0 == .resourceExhausted })
        #expect(codes.filter { $0 == .resourceExhausted }.count >= 40)
        #expect(try await auth.authenticate(alice).user == "alice")
    }
}
