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
