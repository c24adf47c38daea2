import AuthService
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import NotificationHubs
import Testing

/// NH's SharedAccessSignature as each SDK makes it (docs/notification-hubs.md, "SAS tokens"), checked by
/// ``SASVerifier``: one token per SDK's `sr` spelling, parameter order and escape case.
@Suite("SAS", .watchedForStalls)
struct SASTests {
    static let host = "herald.example:8443"
    static let path = "/app1/installations/dev-1"

    struct Fixture {
        let clock: ManualClock
        let hubs: HubStore
        let sas: SASVerifier
        let full: HubKey
        let listen: HubKey
    }

    /// Over `db`, or a SQLite database in memory.
    static func fixture(freeFailures: Int = 3, db: (any SQLDatabase)? = nil) async throws -> Fixture {
        let clock = ManualClock()
        let db = try db ?? SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration))
        let hubs = try await HubStore(db: db, now: clock.function)
        _ = try await hubs.createHub("app1")
        _ = try await hubs.createHub("app2")
        let keys = try await hubs.keys(of: "app1")
        return Fixture(
            clock: clock, hubs: hubs,
            sas: SASVerifier(
                hubs: hubs, throttle: LoginThrottle(freeFailures: freeFailures, now: clock.function),
                now: clock.function),
            full: try #require(keys.first { $0.name == HubRules.fullKeyName }),
            listen: try #require(keys.first { $0.name == HubRules.listenKeyName }))
    }

    static func encode(_ text: String, lower: Bool) -> String { SASTokens.encode(text, lower: lower) }

    /// The token of one SDK: its `sr`, its parameter order, its escape case for `sig`.
    static func token(
        sr: String, key: HubKey, se: Int64, order: [String] = ["sr", "sig", "se", "skn"], lower: Bool = false
    ) -> String {
        SASTokens.token(sr: sr, keyName: key.name, key: key.primaryKey, expiry: se, order: order, lower: lower)
    }

    /// Every SDK's `sr` for a request to `https://host/app1/installations/dev-1?api-version=…`.
    static let variants: [(client: String, sr: String, order: [String], lower: Bool)] = [
        // .NET 4.x: full path, scheme forced to http, trailing /, lower-cased, lower-case escapes.
        (".NET", encode("http://\(host)\(path)/".lowercased(), lower: true), ["sr", "sig", "se", "skn"], true),
        // Java: the full URI with its query, lower-cased before and after encoding.
        (
            "Java", encode("https://\(host)\(path)?api-version=2020-06".lowercased(), lower: true).lowercased(),
            ["sr", "sig", "se", "skn"], true
        ),
        // Go: host only, no slash, lower-cased; url.Values orders keys alphabetically.
        ("Go", encode("https://\(host)".lowercased(), lower: false), ["se", "sig", "skn", "sr"], false),
        // JS: the namespace root as written in the connection string (not lower-cased).
        ("JS", encode("https://Herald.Example:8443/", lower: false), ["sr", "sig", "se", "skn"], false),
        // Python sample: https://{ns}/{hub}, lower-cased after encoding; sig,se,skn,sr.
        ("Python sample", encode("https://\(host)/app1", lower: false).lowercased(), ["sig", "se", "skn", "sr"], true),
        // azure-notification-hub-unofficial: the endpoint lower-cased, upper-case escapes.
        (
            "unofficial Python", encode("https://\(host)/".lowercased(), lower: false), ["sr", "sig", "se", "skn"],
            false
        ),
        // The REST docs' example: https%3a%2f%2f{ns}%2f{hub}%2f… lower-case escapes.
        ("docs", encode("https://\(host)/app1/installations", lower: true), ["sr", "sig", "se", "skn"], true),
    ]

    @Test("every SDK's sr spelling, parameter order and escape case is accepted", arguments: 0..<variants.count)
    func variant(_ index: Int) async throws {
        let f = try await Self.fixture()
        let v = Self.variants[index]
        let se = f.clock.now / 1000 + 600
        let answer = try await f.sas.authorize(
            hub: "app1", header: Self.token(sr: v.sr, key: f.full, se: se, order: v.order, lower: v.lower),
            resource: Self.host + Self.path)
        #expect(answer.keyName == HubRules.fullKeyName, "\(v.client)")
        #expect(HubRights(answer.rights) == .full, "\(v.client)")
        let listen = try await f.sas.authorize(
            hub: "app1", header: Self.token(sr: v.sr, key: f.listen, se: se, order: v.order, lower: v.lower),
            resource: Self.host + Self.path)
        #expect(listen.rights == [.listen], "\(v.client)")
    }

    static func failure(_ body: () async throws -> Any) async -> ServiceError? {
        do {
            _ = try await body()
            return nil
        } catch {
            return error as? ServiceError
        }
    }

    @Test("bad signature, expiry, another hub's audience or key, a prefix not at a slash: 401 with NH's words")
    func refusals() async throws {
        let f = try await Self.fixture(freeFailures: 100)
        let se = f.clock.now / 1000 + 600
        let root = Self.encode("https://\(Self.host)/", lower: false)
        func check(
            _ header: String, hub: String = "app1", resource: String = SASTests.host + SASTests.path, _ words: String
        ) async {
            let error = await Self.failure { try await f.sas.authorize(hub: hub, header: header, resource: resource) }
            #expect(error?.code == .unauthenticated, "\(words): \(String(describing: error))")
            #expect(error?.message.contains(words) == true, "\(String(describing: error?.message))")
        }
        var forged = f.full
        forged.primaryKey = "not-the-key"
        await check(Self.token(sr: root, key: forged, se: se), "InvalidSignature")
        // The signature covers sr exactly as written: re-encoding it is a different message.
        await check(
            Self.token(sr: root, key: f.full, se: se).replacingOccurrences(of: "%3A", with: "%3a"), "InvalidSignature")
        await check(Self.token(sr: root, key: f.full, se: f.clock.now / 1000 - 1), "ExpiredToken")
        await check(
            Self.token(sr: Self.encode("https://\(Self.host)/app2", lower: false), key: f.full, se: se), "audience")
        await check(
            Self.token(sr: Self.encode("https://\(Self.host)/app", lower: false), key: f.full, se: se), "audience")
        await check(
            Self.token(sr: Self.encode("https://other.example/", lower: false), key: f.full, se: se), "audience")
        // Hub A's key on hub B: same key name, other secret.
        await check(
            Self.token(sr: root, key: f.full, se: se), hub: "app2", resource: Self.host + "/app2/installations/x",
            "InvalidSignature")
        await check("SharedAccessSignature sr=\(root)&se=\(se)&skn=x", "MalformedToken")
        // An expiry from outside is read once, bounded: the arithmetic after it cannot trap (once
        // se=9223372036854775807 signed with the Listen key brought herald-auth down).
        for expiry in [
            "9223372036854775807", "-9223372036854775808", "9223372036854775808", "253402300800", "1e99", "+600", "-1",
        ] {
            let signature = SASTokens.encode(SASTokens.signature(root, expiry, key: f.listen.primaryKey), lower: false)
            await check(
                "SharedAccessSignature sr=\(root)&sig=\(signature)&se=\(expiry)&skn=\(f.listen.name)", "MalformedToken")
        }
        await check("Basic YWxpY2U6YWxpY2U=", "MalformedToken")
        // A port in sr is that port only; another host is another audience whatever its port.
        await check(
            Self.token(sr: Self.encode("https://herald.example:9443/", lower: false), key: f.full, se: se), "audience")
        await check(
            Self.token(sr: Self.encode("http://herald.example.evil:8443/", lower: false), key: f.full, se: se),
            "audience")
    }

    @Test(
        "an sr without a port covers its host on any port (the .NET SDK drops it); hosts and IPv6 literals are kept apart"
    )
    func portlessAudience() {
        #expect(
            SASAudience.covers("herald.example/app1", resource: "herald.example:8443/app1/installations/x"))
        #expect(SASAudience.covers("herald.example", resource: "herald.example:8080/app1"))
        #expect(!SASAudience.covers("herald.example:9443/app1", resource: "herald.example:8443/app1"))
        #expect(!SASAudience.covers("herald.exam", resource: "herald.example:8443/app1"))
        #expect(!SASAudience.covers("herald.example/app", resource: "herald.example:8443/app1"))
        #expect(SASAudience.covers("[::1]/app1", resource: "[::1]:8080/app1/messages"))
        #expect(!SASAudience.covers("[::1]:9/app1", resource: "[::1]:8080/app1/messages"))
        #expect(!SASAudience.covers("[::1]", resource: "[::2]:8080/app1"))
    }

    @Test(
        "a correctly signed token is always served; an address past its free failures gets 429 for its failures, not for its good tokens"
    )
    func throttled() async throws {
        let f = try await Self.fixture()
        let se = f.clock.now / 1000 + 3600
        let root = Self.encode("https://\(Self.host)/", lower: false)
        var forged = f.full
        forged.primaryKey = "guess"
        func authorize(_ key: HubKey, from client: String) async throws -> AuthorizeSasResponse {
            try await f.sas.authorize(
                hub: "app1", header: Self.token(sr: root, key: key, se: se), resource: Self.host + Self.path,
                client: client)
        }
        // 20 forged tokens naming the Full key once locked that key out for everyone behind one address.
        for _ in 0..<20 { _ = await Self.failure { try await authorize(forged, from: "192.0.2.1") } }
        let slowed = await Self.failure { try await authorize(forged, from: "192.0.2.1") }
        #expect(slowed?.code == .resourceExhausted)
        #expect((slowed?.retryAfterSeconds ?? 0) > 0)
        await #expect(throws: Never.self) { try await authorize(f.full, from: "192.0.2.1") }
        await #expect(throws: Never.self) { try await authorize(f.listen, from: "192.0.2.1") }
        // Other addresses' failures are still plain 401s.
        #expect(await Self.failure { try await authorize(forged, from: "198.51.100.7") }?.code == .unauthenticated)
        f.clock.advance(seconds: 31 * 60)
        #expect(await Self.failure { try await authorize(forged, from: "192.0.2.1") }?.code == .unauthenticated)
    }

    @Test("unknown hub, unknown key and wrong signature are one answer; key names and headers are bounded")
    func noEnumeration() async throws {
        let f = try await Self.fixture(freeFailures: 1000)
        let se = f.clock.now / 1000 + 600
        let root = Self.encode("https://\(Self.host)/", lower: false)
        var forged = f.full
        forged.primaryKey = "not-the-key"
        var unknownKey = f.full
        unknownKey.name = "NoSuchKey"
        let answers = [
            await Self.failure {
                try await f.sas.authorize(
                    hub: "app1", header: Self.token(sr: root, key: forged, se: se), resource: Self.host + Self.path)
            },
            await Self.failure {
                try await f.sas.authorize(
                    hub: "app1", header: Self.token(sr: root, key: unknownKey, se: se), resource: Self.host + Self.path)
            },
            await Self.failure {
                try await f.sas.authorize(
                    hub: "nohub", header: Self.token(sr: root, key: f.full, se: se), resource: Self.host + "/nohub/x")
            },
        ]
        #expect(
            Set(answers.map { $0?.message ?? "none" }) == ["InvalidSignature: The token has an invalid signature."],
            "\(answers)")
        var long = f.full
        long.name = String(repeating: "k", count: SharedAccessSignature.maxKeyNameLength + 1)
        let tooLong = await Self.failure {
            try await f.sas.authorize(
                hub: "app1", header: Self.token(sr: root, key: long, se: se), resource: Self.host + Self.path)
        }
        #expect(tooLong?.message.contains("MalformedToken") == true)
        let padded = "SharedAccessSignature " + String(repeating: "x", count: SharedAccessSignature.maxHeaderLength)
        #expect(
            await Self.failure { try await f.sas.authorize(hub: "app1", header: padded, resource: Self.host) }?.message
                .contains(
                    "MalformedToken") == true)
    }

    @Test("rotation ends the old secret at once and keeps the other; revoking a key ends its tokens")
    func rotateAndRevoke() async throws {
        let f = try await Self.fixture()
        let se = f.clock.now / 1000 + 600
        let root = Self.encode("https://\(Self.host)/", lower: false)
        let old = Self.token(sr: root, key: f.full, se: se)
        var secondary = f.full
        secondary.primaryKey = f.full.secondaryKey
        let viaSecondary = Self.token(sr: root, key: secondary, se: se)
        let rotated = try await f.hubs.rotateKey(hub: "app1", name: f.full.name, secondary: false)
        #expect(rotated.primaryKey != f.full.primaryKey && rotated.secondaryKey == f.full.secondaryKey)
        #expect(
            await Self.failure { try await f.sas.authorize(hub: "app1", header: old, resource: Self.host + Self.path) }?
                .code
                == .unauthenticated)
        await #expect(throws: Never.self) {
            try await f.sas.authorize(hub: "app1", header: viaSecondary, resource: Self.host + Self.path)
        }
        try await f.hubs.revokeKey(hub: "app1", name: f.full.name)
        #expect(
            await Self.failure {
                try await f.sas.authorize(hub: "app1", header: viaSecondary, resource: Self.host + Self.path)
            }?.code
                == .unauthenticated)
    }

    @Test(
        "hubs: default always exists and cannot go; names are checked; keys and grants belong to one hub",
        arguments: StoreBackend.available)
    func hubs(_ backend: StoreBackend) async throws {
        try await TestDatabases.withDatabase(backend, service: "auth") { db in
            let f = try await Self.fixture(db: db)
            #expect(try await f.hubs.listHubs().map(\.name) == ["app1", "app2", "default"])
            #expect(try await f.hubs.hub("app1").keys.allSatisfy { $0.primaryKey.isEmpty && $0.secondaryKey.isEmpty })
            #expect(f.full.primaryKey.count == 44 && f.full.primaryKey != f.full.secondaryKey)
            #expect(await Self.failure { try await f.hubs.deleteHub("default") }?.code == .failedPrecondition)
            #expect(await Self.failure { try await f.hubs.createHub("app1") }?.code == .alreadyExists)
            for bad in ["", "-x", "a/b", "api", "v1", String(repeating: "a", count: 51)] {
                #expect(await Self.failure { try await f.hubs.createHub(bad) }?.code == .invalidArgument, "\(bad)")
            }
            let key = try await f.hubs.setKey(hub: "app1", name: "backend", rights: try HubRights(names: ["send"]))
            #expect(key.rights == [.send] && !key.primaryKey.isEmpty)
            #expect(
                try await f.hubs.setKey(hub: "app1", name: "backend", rights: try HubRights(names: ["Manage"])).rights
                    == [.listen, .manage, .send])
            #expect(await Self.failure { try HubRights(names: ["Admin"]) }?.code == .invalidArgument)
            try await f.hubs.grant(hub: "app1", user: "alice", rights: .send)
            #expect(try await f.hubs.rights(hub: "app1", user: "alice") == .send)
            #expect(try await f.hubs.rights(hub: "app2", user: "alice") == [])
            // Limits: stored, changed, answered with every authorization.
            #expect(try await f.hubs.createHub("limited", maxInstallations: 5).maxInstallations == 5)
            #expect(try await f.hubs.setLimits(hub: "limited", maxInstallations: 7).maxInstallations == 7)
            #expect(
                await Self.failure { try await f.hubs.setLimits(hub: "limited", maxInstallations: -1) }?.code
                    == .invalidArgument)
            #expect(
                await Self.failure { try await f.hubs.setLimits(hub: "nope", maxInstallations: 1) }?.code == .notFound)
            let limitedFull = try #require(
                try await f.hubs.keys(of: "limited").first { $0.name == HubRules.fullKeyName })
            let answer = try await f.sas.authorize(
                hub: "limited",
                header: Self.token(
                    sr: Self.encode("https://\(Self.host)/", lower: false), key: limitedFull,
                    se: f.clock.now / 1000 + 60),
                resource: Self.host + "/limited/installations/x")
            #expect(answer.maxInstallations == 7)
            try await f.hubs.deleteHub("app1")
            #expect(await Self.failure { try await f.hubs.keys(of: "app1") }?.code == .notFound)
            #expect(try await f.hubs.rights(hub: "app1", user: "alice") == [])
        }
    }

    @Test(
        "hub names are found regardless of case and unique regardless of case; a hub made again gets a new id",
        arguments: StoreBackend.available)
    func hubIdentity(_ backend: StoreBackend) async throws {
        try await TestDatabases.withDatabase(backend, service: "auth") { db in
            let f = try await Self.fixture(db: db)
            #expect(try await f.hubs.hub("default").id == "default")
            let made = try await f.hubs.createHub("ProbeHub", maxInstallations: 0)
            #expect(made.name == "ProbeHub" && made.id.count == 17 && made.id.hasPrefix("h"))
            #expect(try await f.hubs.resolve("probehub") == HubIdentity(name: "ProbeHub", id: made.id))
            #expect(try await f.hubs.resolve("PROBEHUB")?.id == made.id)
            #expect(try await f.hubs.hub("probeHUB").name == "ProbeHub")
            #expect(try await f.hubs.resolve("nope") == nil)
            #expect(await Self.failure { try await f.hubs.createHub("probehub") }?.code == .alreadyExists)
            // A token for the path's spelling of the name is checked against the hub's keys, and the
            // answer carries the hub's id, which is what the edge passes on.
            let full = try #require(try await f.hubs.keys(of: "ProbeHub").first { $0.name == HubRules.fullKeyName })
            let answer = try await f.sas.authorize(
                hub: "PROBEHUB",
                header: Self.token(
                    sr: Self.encode("https://\(Self.host)/", lower: false), key: full, se: f.clock.now / 1000 + 60),
                resource: Self.host + "/PROBEHUB/installations/x")
            #expect(answer.hubID == made.id)
            // Deleted and made again under the same name: a new id, so nothing of the old one is seen.
            try await f.hubs.deleteHub("ProbeHub")
            let again = try await f.hubs.createHub("probehub", maxInstallations: 0)
            #expect(again.id != made.id)
        }
    }

    @Test(
        "hubs made before ids existed keep their name as id; two that differ only by case stay reachable by exact name")
    func hubIdentityMigration() async throws {
        let db = try DatabaseQueue(configuration: HeraldDatabase.configuration)
        // The schema as it was before v4-hub-id, with two hubs that differ only by case.
        try SQLiteDatabase.migrator(for: AuthSchema.schema).migrate(db, upTo: "v3-hub-limits")
        try await db.write { db in
            for name in ["Tenant", "tenant"] {
                try db.execute(sql: "INSERT INTO hub (name, created_at) VALUES (?, 0)", arguments: [name])
            }
        }
        let hubs = try await HubStore(db: SQLiteDatabase(db))
        #expect(try await hubs.resolve("Tenant") == HubIdentity(name: "Tenant", id: "Tenant"))
        #expect(try await hubs.resolve("tenant") == HubIdentity(name: "tenant", id: "tenant"))
        #expect(try await hubs.resolve("TENANT") != nil)
        #expect(try await hubs.hub("default").id == "default")
    }

    @Test("SQLite's v5-account keeps every account, token and grant written under the old names")
    func accountNamesMigration() async throws {
        let db = try DatabaseQueue(configuration: HeraldDatabase.configuration)
        try SQLiteDatabase.migrator(for: AuthSchema.schema).migrate(db, upTo: "lockout")
        let hash = Data(repeating: 7, count: 32)
        try await db.write { db in
            try db.execute(
                sql:
                    "INSERT INTO user (name, password_hash, created_at, password_changed_at) VALUES ('alice', 'h', 1, 2)"
            )
            try db.execute(
                sql: "INSERT INTO token (hash, user, created_at, expires_at) VALUES (?, 'alice', 1, ?)",
                arguments: [hash, Int64.max])
            try db.execute(sql: "INSERT INTO hub (name, id, created_at) VALUES ('shop', 'shop', 0)")
            try db.execute(sql: "INSERT INTO hub_grant (hub, user, rights) VALUES ('shop', 'alice', 2)")
        }
        let sql = SQLiteDatabase(db)
        let accounts = try await AccountStore(db: sql)
        let hubs = try await HubStore(db: sql)
        #expect(try await accounts.passwordHash(of: "alice") == "h")
        #expect(try await accounts.tokenUser(hash: hash)?.user == "alice")
        #expect(try await hubs.rights(hub: "shop", user: "alice") == HubRights(rawValue: 2))
        #expect(try await hubs.resolve("SHOP")?.id == "shop")
    }
}
