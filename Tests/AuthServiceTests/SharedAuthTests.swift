import AuthService
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Logging
import Testing

/// Two herald-auth replicas on one PostgreSQL schema: each its own pool and its own Authenticator,
/// as two processes would have; what one does, the other must see.
@Suite(
    "auth replicas on PostgreSQL", .enabled(if: TestDatabases.postgresURL != nil, "needs HERALD_TEST_POSTGRES_URL"),
    .watchedForStalls)
struct SharedAuthTests {
    struct Replica {
        let auth: Authenticator
        let hubs: HubStore
        let sas: SASVerifier
        let audit: AuditStore
    }

    /// Runs `body` with two replicas sharing a fresh schema.
    static func withReplicas(_ body: (Replica, Replica) async throws -> Void) async throws {
        try await TestDatabases.withPostgres(service: "auth") { first in
            let url = try #require(TestDatabases.postgresURL) + "&schema=\(first.schema)"
            guard case .postgres(let location) = try DatabaseURL(url, service: "auth") else { return }
            let second = try HeraldPostgres(
                location, logger: Logger(label: "replica-2"), maximumConnections: 4,
                connectWait: TestDatabases.connectWait)
            func replica(_ db: HeraldPostgres) async throws -> Replica {
                let ledger = SharedLockoutLedger(db: db.sql)
                let auth = try Authenticator(
                    mode: .accounts, store: try await AccountStore(db: db.sql), hasher: PasswordHasher(logN: 10),
                    throttle: LoginThrottle(freeFailures: 5, lockout: .seconds(30), ledger: ledger),
                    // One hashing pool for every test here (see AuthTests.make).
                    gate: LoginGate(maxPending: 8, failureBudgetPerMinute: 600, maxWaitMilliseconds: 600_000),
                    tokenTTL: .seconds(600),
                    credentialCache: .seconds(60))
                let hubs = try await HubStore(db: db.sql)
                return Replica(
                    auth: auth, hubs: hubs,
                    sas: SASVerifier(hubs: hubs, throttle: LoginThrottle(freeFailures: 3, ledger: ledger)),
                    audit: try await AuditStore(db: db.sql))
            }
            // Both start together, as replicas do: the migrations and the default hub happen once.
            async let a = replica(first)
            async let b = replica(second)
            try await body(try await a, try await b)
        }
    }

    static func basic(_ credentials: String) -> String { "Basic " + Data(credentials.utf8).base64EncodedString() }

    @Test("audit records appended on both replicas at once make one chain 1…60 with no gap, and it verifies")
    func auditChainAcrossReplicas() async throws {
        try await Self.withReplicas { a, b in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<60 {
                    let replica = n.isMultiple(of: 2) ? a : b
                    group.addTask {
                        _ = try await replica.audit.append(
                            AppendAuditRequest(actor: "user:ops", action: "key.set", hub: "app1", target: "k\(n)"))
                    }
                }
                try await group.waitForAll()
            }
            var records: [AuditRecord] = []
            var after: Int64 = 0
            while true {
                let page = try await b.audit.list(ListAuditRequest(scope: .all, afterSeq: after, limit: 25))
                records += page.records
                guard page.nextAfterSeq > 0 else { break }
                after = page.nextAfterSeq
            }
            #expect(records.map(\.seq) == Array(1...60))
            #expect(Set(records.map(\.target)).count == 60)
            var verifier = AuditChain.Verifier()
            for record in records { verifier.check(record) }
            #expect(verifier.breaks == [])
        }
    }

    @Test("five failures spread over two replicas lock the name out on either (429 with Retry-After)")
    func lockoutAcrossReplicas() async throws {
        try await Self.withReplicas { a, b in
            _ = try await a.auth.createUser("alice", password: "alice's password")
            #expect(try await b.auth.authenticate(Self.basic("alice:alice's password")).user == "alice")
            for attempt in 0..<5 {
                let replica = attempt % 2 == 0 ? a : b
                await #expect(throws: ServiceError.self) {
                    try await replica.auth.authenticate(Self.basic("alice:guess \(attempt)"))
                }
            }
            for replica in [a, b] {
                // Locked: even the right password, on either replica.
                await #expect {
                    try await replica.auth.authenticate(Self.basic("alice:alice's password"))
                } throws: { error in
                    let error = error as? ServiceError
                    return error?.code == .resourceExhausted && (error?.retryAfterSeconds ?? 0) > 0
                }
            }
        }
    }

    @Test("a password changed or a token revoked on one replica is refused at once on the other, cache or not")
    func changesReachTheOtherReplica() async throws {
        try await Self.withReplicas { a, b in
            _ = try await a.auth.createUser("bob", password: "bob's first password")
            // b verifies (and caches) the first password.
            #expect(try await b.auth.authenticate(Self.basic("bob:bob's first password")).user == "bob")
            _ = try await a.auth.setPassword("bob", password: "bob's second password")
            await #expect(throws: ServiceError.self) {
                try await b.auth.authenticate(Self.basic("bob:bob's first password"))
            }
            #expect(try await b.auth.authenticate(Self.basic("bob:bob's second password")).user == "bob")
            let token = try await b.auth.issueToken(Self.basic("bob:bob's second password")).token
            #expect(try await a.auth.authenticate("Bearer \(token)").user == "bob")
            #expect(try await a.auth.revokeToken(token) == 1)
            await #expect(throws: ServiceError.self) { try await b.auth.authenticate("Bearer \(token)") }
            await #expect(throws: ServiceError.self) {
                try await a.auth.createUser("bob", password: "another password")
            }
            #expect(try await b.auth.store.listUsers().map(\.name) == ["bob"])
        }
    }

    @Test("hubs, keys and grants made on one replica serve the other; the default hub exists once")
    func hubsAcrossReplicas() async throws {
        try await Self.withReplicas { a, b in
            #expect(try await a.hubs.listHubs().map(\.name) == ["default"])
            _ = try await a.hubs.createHub("app1", maxInstallations: 5)
            await #expect(throws: ServiceError.self) { try await b.hubs.createHub("app1", maxInstallations: 0) }
            let key = try await b.hubs.setKey(hub: "app1", name: "backend", rights: [.send])
            #expect(key.rights == [.send] && !key.primaryKey.isEmpty)
            let secrets = try #require(try await a.hubs.secrets(hub: "app1", name: "backend"))
            #expect(secrets.primary == key.primaryKey && secrets.maxInstallations == 5 && secrets.rights == [.send])
            let rotated = try await a.hubs.rotateKey(hub: "app1", name: "backend", secondary: true)
            #expect(rotated.secondaryKey != key.secondaryKey && rotated.primaryKey == key.primaryKey)
            try await a.hubs.grant(hub: "app1", user: "carol", rights: .full)
            #expect(try await b.hubs.rights(hub: "app1", user: "carol") == .full)
            #expect(try await b.hubs.hub("app1").keys.count == 3)
            await #expect(throws: ServiceError.self) { try await b.hubs.deleteHub("default") }
            try await b.hubs.deleteHub("app1")
            #expect(try await a.hubs.rights(hub: "app1", user: "carol") == [])
            #expect(try await a.hubs.secrets(hub: "app1", name: "backend") == nil)
            // Names regardless of case, ids new on every creation (as on SQLite).
            let made = try await a.hubs.createHub("ProbeHub", maxInstallations: 0)
            #expect(try await b.hubs.resolve("PROBEHUB") == HubIdentity(name: "ProbeHub", id: made.id))
            #expect(try await b.hubs.secrets(hub: "probehub", name: HubRules.fullKeyName)?.hubID == made.id)
            await #expect(throws: ServiceError.self) { try await b.hubs.createHub("probehub", maxInstallations: 0) }
            try await b.hubs.deleteHub("ProbeHub")
            #expect(try await a.hubs.createHub("probehub", maxInstallations: 0).id != made.id)
            #expect(try await b.hubs.hub("default").id == "default")
            #expect(try await a.hubs.deleteEverything() > 0)
            #expect(try await b.hubs.listHubs().map(\.name) == ["default"])
        }
    }
}
