import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Synchronization
import Testing

/// Password sprays against herald-auth in a process of its own, at a real
/// hash cost (2^12, below), timed against the edge's deadline and the login gate's room. In a shared test
/// process every other stack's work takes from the hashes' CPU: in fresh-clone CI runs CreateUser
/// took 5 s a hash and missed its 30 s deadline, and the gate's room shrank under the slower hashes.
@Suite("hostile clients: password sprays at a real hash cost", .serialized, .timeLimit(.minutes(5)), .watchedForStalls)
struct PasswordSprayTests {
    @Test(
        "a password spray is answered at once: 401 or 429 with Retry-After, never 503; the real user gets in",
        .sqliteStack)
    func passwordSpray() async throws {
        // On SQLite: what this proves is that the gate keeps hashes from queueing past the edge's
        // deadline. On PostgreSQL the lockout ledger's round trips stand outside the gate, and on a
        // loaded CI machine sharing one cluster a login can miss the deadline there (the PostgreSQL
        // pass saw a 503): a known limit, in docs/security.md. The stack being SQLite in both
        // passes, the second run proved nothing new, beside the PostgreSQL pass's heavier suites,
        // whose load once stretched a hash that had started in time past the deadline (503).
        try await LiveStack.with(
            runner: .processes, auth: .accounts, users: ["alice"], database: .sqlite,
            configure: {
                // A real cost, so hashes queue as they would in production: 2^12 in this debug
                // build, whose BoringSSL is compiled without optimisation, costs about what 2^15 does
                // in a release build. 2^15 here made these drills 16% of the CPU of CI's busiest
                // stage (perf: salsa20/8 in herald-auth) and 256 s of its critical path; the gate
                // refuses by its room and each address's share, which cheaper hashes do not change.
                $0.extraArguments["auth"] = ["--password-hash-log-n", "12"]
            }
        ) { live in
            let edge = live.edge
            // Wrong passwords for names that exist: made-up names take no hash and no slot.
            // Sixteen at once are twice the gate's room (8) and four times one address's share: as
            // many are refused as 50 would show, for a third of the hashes (each hashed twice: the
            // user's creation and the guess).
            for index in 0..<16 { try await live.addUser("victim\(index)", password: "secret-\(index)", send: false) }
            let statuses = try await withThrowingTaskGroup(of: (Int, String?).self) { group in
                for index in 0..<16 {
                    group.addTask {
                        let reply = try await edge.request(
                            "POST", "/api/register", authorization: EdgeClient.basic("victim\(index)", "guess-\(index)")
                        )
                        return (reply.status, reply.header("Retry-After"))
                    }
                }
                return try await group.reduce(into: [(Int, String?)]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0.0 == 401 || ($0.0 == 429 && $0.1 != nil) }, "\(statuses)")
            #expect(statuses.contains { $0.0 == 429 })
            // The real user, honouring Retry-After, gets in: every answer on the way is 429 with
            // Retry-After (never a 503 after the edge's deadline).
            let start = ContinuousClock.now
            var status = 0
            while ContinuousClock.now - start < .seconds(20) {
                let reply = try await edge.request("POST", "/api/register", as: "alice")
                status = reply.status
                guard status == 429, let wait = reply.header("Retry-After").flatMap(Int.init) else { break }
                try await Task.sleep(for: .seconds(wait))
            }
            #expect(status == 200)
        }
    }

    /// Where the sprayer and the users of ``sprayShare(_:)`` log in from, and with what names.
    enum SprayCase: String, CaseIterable, CustomTestStringConvertible {
        /// Wrong passwords for real names from 127.0.0.1; the users from 127.0.0.2.
        case otherAddress
        /// The same through a trusted proxy: both from 127.0.0.1, named apart in X-Forwarded-For.
        case throughProxy
        /// Made-up names and the users from one address (a NAT, a campus): made-up names take no
        /// slot and no budget, so the users are let in at the first try.
        case madeUpNamesSameAddress
        var testDescription: String { rawValue }
    }

    @Test(
        "a spray from one address leaves room for another, and a spray of made-up names leaves room for its own address's users",
        .sqliteStack,
        arguments: SprayCase.allCases)
    func sprayShare(_ sprayCase: SprayCase) async throws {
        // throughProxy: sprayer and users reach the edge from one address, a proxy's (127.0.0.1),
        // which names each client in X-Forwarded-For; the edge trusts it (trusted-proxies), so the
        // share holds by the addresses it names. Without the setting, every
        // client would be the proxy: one share for all, and the users turned away with the sprayer.
        let throughProxy = sprayCase == .throughProxy
        let madeUp = sprayCase == .madeUpNamesSameAddress
        let sprayHeaders = throughProxy ? [("X-Forwarded-For", "203.0.113.66")] : []
        // On SQLite, as the burst test above and for the same reason: the share per address is the
        // gate's, in memory; on PostgreSQL the lockout ledger's round trips stand outside the gate,
        // and a loaded PostgreSQL pass once made a user's login from the second address miss the
        // edge's deadline (503), which says nothing about the share.
        let users = ["alice", "bob", "carol"]
        try await LiveStack.with(
            runner: .processes,
            auth: .accounts, users: users, database: .sqlite,
            configure: {
                // No lockouts: the sprayer's wrong passwords for 16 real names keep hashing.
                $0.extraArguments["auth"] = ["--password-hash-log-n", "12", "--max-failed-logins", "1000"]
                if throughProxy { $0.extraArguments["edge", default: []] += ["--trusted-proxies", "127.0.0.1/32"] }
            }
        ) { live in
            let edge = live.edge
            if !madeUp {
                for index in 0..<16 {
                    try await live.addUser("victim\(index)", password: "secret-password", send: false)
                }
            }
            final class Counters: Sendable {
                let stop = Atomic<Bool>(false)
                let refused = Atomic<Int>(0)
                let sent = Atomic<Int>(0)
            }
            let counters = Counters()
            // 8 clients on 127.0.0.1 send logins with unknown names until told to stop, each trying
            // again 20 ms after a refusal: the sprayer keeps every slot it may hold, and the churn of
            // refusals does not itself starve a loaded CI machine (which once made auth miss the
            // edge's deadline: 503).
            let spray = Task {
                try await withThrowingTaskGroup(of: [Int].self) { group in
                    for client in 0..<8 {
                        group.addTask {
                            var statuses: [Int] = []
                            var index = 0
                            while !counters.stop.load(ordering: .relaxed) {
                                index += 1
                                let name = madeUp ? "spray\(client)-\(index)" : "victim\((client + index) % 16)"
                                let reply = try await edge.request(
                                    "POST", "/api/register", authorization: EdgeClient.basic(name, "guess"),
                                    headers: sprayHeaders)
                                statuses.append(reply.status)
                                counters.sent.add(1, ordering: .relaxed)
                                if reply.status == 429 {
                                    counters.refused.add(1, ordering: .relaxed)
                                    try await Task.sleep(for: .milliseconds(20))
                                }
                            }
                            return statuses
                        }
                    }
                    return try await group.reduce(into: [Int]()) { $0 += $1 }
                }
            }
            let deadline = ContinuousClock.now + .seconds(20)
            if madeUp {
                // Made-up names are never refused for room: wait until the spray is well under way.
                while counters.sent.load(ordering: .relaxed) < 80, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(counters.sent.load(ordering: .relaxed) >= 80, "the spray never got going")
            } else {
                while counters.refused.load(ordering: .relaxed) < 8, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(counters.refused.load(ordering: .relaxed) >= 8, "the spray never filled the gate")
            }
            // Each user, from 127.0.0.2, while the spray goes on: let in at once. Under a machine
            // that slows down meanwhile, the gate shrinks under the slots the sprayer already holds,
            // so a user may be refused at the door and need another try after Retry-After; and one
            // let in may still be answered 429 when the machine is slower than the gate's estimate
            // ("waited too long for its turn", "still being checked"). Without the share per
            // address the sprayer holds every slot: no user is let in at the first try.
            var inAt: [String: Int] = [:]
            var admittedFirst: [String] = []
            for user in users {
                let header = EdgeClient.basic(user, EdgeClient.password(of: user, in: .accounts))
                // Eight tries: in two fresh-clone runs of `.ci/run` on 2 cores, users let in at
                // the first try were answered 429 until their 3rd-4th, and once past the 4th.
                for attempt in 1...8 {
                    let answer =
                        switch sprayCase {
                        case .throughProxy:
                            try await Self.rawLogin(
                                live, header: header, from: "127.0.0.1", extra: "X-Forwarded-For: 198.51.100.7\r\n")
                        case .otherAddress: try await Self.rawLogin(live, header: header, from: "127.0.0.2")
                        case .madeUpNamesSameAddress: try await Self.rawLogin(live, header: header, from: "127.0.0.1")
                        }
                    let turnedAway = answer.contains("too many logins in progress")
                    if attempt == 1, !turnedAway { admittedFirst.append(user) }
                    if answer.hasPrefix("HTTP/1.1 200") {
                        inAt[user] = attempt
                        break
                    }
                    #expect(answer.hasPrefix("HTTP/1.1 429"), "\(answer.prefix(300))")
                    try await Task.sleep(for: .seconds(1))
                }
            }
            counters.stop.store(true, ordering: .relaxed)
            let statuses = try await spray.value
            print(
                "spray share (\(sprayCase)): \(statuses.count) spray logins (\(statuses.filter { $0 == 429 }.count) refused), in at try \(inAt), let in at the first try: \(admittedFirst)"
            )
            // The sprayer's own answers: refused or failed, never a 500. (A 503 with Retry-After is
            // tolerated here: "never 503" is the burst test's promise above; this one's is that the
            // users get in.)
            #expect(statuses.allSatisfy { [401, 429, 503].contains($0) }, "\(Set(statuses))")
            #expect(inAt.count == users.count, "\(inAt)")
            #expect(!admittedFirst.isEmpty, "no user was let in at the first try: \(inAt)")
            if madeUp {
                // Made-up names hold no slot: every user is let in at the door. A made-up name is
                // still refused whenever a real name would be at that moment (LoginGate.withoutHash:
                // the same refusals, so the answer does not tell names apart); on a loaded machine
                // the gate's room shrinks to the users' own hashes, and a made-up name meeting it
                // full is told "too many logins in progress" as a real one would be (98 of 201 in
                // a run beside the other test process).
                #expect(admittedFirst.count == users.count, "\(admittedFirst)")
            }
        }
    }

    /// `POST /api/register` with `header` from the local address `source`; the whole answer.
    static func rawLogin(_ live: LiveStack, header: String, from source: String, extra: String = "") async throws
        -> String
    {
        try await rawExchange(
            live.edge.base.absoluteString,
            "POST /api/register HTTP/1.1\r\nHost: herald\r\nAuthorization: \(header)\r\n\(extra)Content-Length: 0\r\nConnection: close\r\n\r\n",
            from: source)
    }
}
