import AuthService
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Synchronization
import Testing

@Suite("auth", .watchedForStalls)
struct AuthTests {
    static func basic(_ credentials: String) -> String { "Basic " + Data(credentials.utf8).base64EncodedString() }

    static func make(_ mode: AuthMode, clock: ManualClock = ManualClock(), cacheSeconds: Int64 = 60) async throws
        -> Authenticator
    {
        let store = try await AccountStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)), now: clock.function)
        return try Authenticator(
            mode: mode, store: store, hasher: PasswordHasher(logN: 10),
            throttle: LoginThrottle(freeFailures: 3, lockout: .seconds(30), now: clock.function),
            // The tests of this process share one hashing pool, which the gate's wait model does not
            // know of: a login may wait behind another test's hashes longer than any production bound.
            gate: LoginGate(maxPending: 8, failureBudgetPerMinute: 600, maxWaitMilliseconds: 600_000),
            tokenTTL: .seconds(600), credentialCache: .seconds(cacheSeconds), now: clock.function)
    }

    @Test("tutorial mode accepts user == password and nothing else")
    func tutorialAuth() async throws {
        let auth = try await Self.make(.tutorial)
        let alice = try await auth.authenticate(Self.basic("alice:alice"))
        #expect(alice.user == "alice" && alice.scheme == "basic")
        let bob = try await auth.authenticate("basic  " + Data("bob:bob".utf8).base64EncodedString())
        #expect(bob.user == "bob")
        for bad in [
            "", "Basic", "Basic !!!", Self.basic("alice:bob"), Self.basic("alice"), Self.basic(":"),
            Self.basic("a b:a b"), Self.basic("username:x:username:x"), "Bearer abc", "Digest x",
        ] {
            #expect(await statusCode { try await auth.authenticate(bad) } == .unauthenticated, "\(bad)")
        }
    }

    @Test("accounts: the right password only, unknown users refused the same way")
    func accounts() async throws {
        let auth = try await Self.make(.accounts, cacheSeconds: 0)
        _ = try await auth.createUser("alice", password: "correct horse")
        #expect(try await auth.authenticate(Self.basic("alice:correct horse")).user == "alice")
        #expect(await statusCode { try await auth.authenticate(Self.basic("alice:alice")) } == .unauthenticated)
        #expect(
            await statusCode { try await auth.authenticate(Self.basic("mallory:correct horse")) } == .unauthenticated)
        #expect(await statusCode { try await auth.createUser("alice", password: "another one") } == .alreadyExists)
        #expect(await statusCode { try await auth.createUser("bob", password: "short") } == .invalidArgument)
        #expect(await statusCode { try await auth.createUser("b b", password: "long enough") } == .invalidArgument)
        let stored = try #require(try await auth.store.passwordHash(of: "alice"))
        #expect(stored.hasPrefix("$scrypt$ln=10,r=8,p=1$"))
        #expect(!stored.contains("correct horse"))

        _ = try await auth.setPassword("alice", password: "battery staple")
        #expect(await statusCode { try await auth.authenticate(Self.basic("alice:correct horse")) } == .unauthenticated)
        #expect(try await auth.authenticate(Self.basic("alice:battery staple")).user == "alice")
        try await auth.deleteUser("alice")
        #expect(
            await statusCode { try await auth.authenticate(Self.basic("alice:battery staple")) } == .unauthenticated)
        #expect(try await auth.store.listUsers().isEmpty)
    }

    @Test("a password change forgets cached credentials at once")
    func cacheForgets() async throws {
        let auth = try await Self.make(.accounts, cacheSeconds: 600)
        _ = try await auth.createUser("carol", password: "first password")
        #expect(try await auth.authenticate(Self.basic("carol:first password")).user == "carol")
        #expect(try await auth.authenticate(Self.basic("carol:first password")).user == "carol")  // cached
        _ = try await auth.setPassword("carol", password: "second password")
        #expect(
            await statusCode { try await auth.authenticate(Self.basic("carol:first password")) } == .unauthenticated)
    }

    @Test("repeated failures lock a user name out, growing, and the lock lifts")
    func lockout() async throws {
        let clock = ManualClock()
        let auth = try await Self.make(.accounts, clock: clock)
        _ = try await auth.createUser("dave", password: "the password")
        for _ in 0..<3 {
            #expect(await statusCode { try await auth.authenticate(Self.basic("dave:guess")) } == .unauthenticated)
        }
        // Locked: even the right password is refused, without a hash being computed.
        #expect(await statusCode { try await auth.authenticate(Self.basic("dave:the password")) } == .resourceExhausted)
        clock.advance(seconds: 31)
        #expect(await statusCode { try await auth.authenticate(Self.basic("dave:guess")) } == .unauthenticated)
        clock.advance(seconds: 31)  // the second lock is 60 s
        #expect(await statusCode { try await auth.authenticate(Self.basic("dave:the password")) } == .resourceExhausted)
        clock.advance(seconds: 30)
        #expect(try await auth.authenticate(Self.basic("dave:the password")).user == "dave")
        // Success resets the count.
        #expect(await statusCode { try await auth.authenticate(Self.basic("dave:guess")) } == .unauthenticated)
        #expect(try await auth.authenticate(Self.basic("dave:the password")).user == "dave")
        // Unknown names are throttled the same way (no hint that they do not exist).
        for _ in 0..<3 { _ = await statusCode { try await auth.authenticate(Self.basic("nobody:x")) } }
        #expect(await statusCode { try await auth.authenticate(Self.basic("nobody:x")) } == .resourceExhausted)
    }

    @Test("bearer tokens: issued for Basic, expire, revocable, stored hashed")
    func tokens() async throws {
        let clock = ManualClock()
        let auth = try await Self.make(.accounts, clock: clock)
        _ = try await auth.createUser("erin", password: "erin's password")
        let issued = try await auth.issueToken(Self.basic("erin:erin's password"))
        #expect(issued.user == "erin")
        #expect(issued.token.hasPrefix("hrd_") && issued.token.count > 40)
        #expect(issued.expiresAtUnixMs == clock.now + 600_000)
        let principal = try await auth.authenticate("Bearer \(issued.token)")
        #expect(principal.user == "erin" && principal.scheme == "bearer")
        #expect(await statusCode { try await auth.issueToken("Bearer \(issued.token)") } == .unauthenticated)
        #expect(await statusCode { try await auth.issueToken(Self.basic("erin:wrong password")) } == .unauthenticated)

        clock.advance(seconds: 601)
        #expect(await statusCode { try await auth.authenticate("Bearer \(issued.token)") } == .unauthenticated)

        let second = try await auth.issueToken(Self.basic("erin:erin's password"))
        #expect(try await auth.revokeToken(second.token) == 1)
        #expect(await statusCode { try await auth.authenticate("Bearer \(second.token)") } == .unauthenticated)

        let third = try await auth.issueToken(Self.basic("erin:erin's password"))
        _ = try await auth.setPassword("erin", password: "a new password")
        #expect(await statusCode { try await auth.authenticate("Bearer \(third.token)") } == .unauthenticated)

        let fourth = try await auth.issueToken(Self.basic("erin:a new password"))
        #expect(try await auth.revokeTokens(of: "erin") == 1)
        #expect(await statusCode { try await auth.authenticate("Bearer \(fourth.token)") } == .unauthenticated)
        #expect(await statusCode { try await auth.revokeTokens(of: "nobody") } == .notFound)
    }

    @Test("password hashes: salted, self-describing, malformed ones never match")
    func hasher() throws {
        let hasher = PasswordHasher(logN: 10)
        let one = try hasher.hash("secret password")
        let two = try hasher.hash("secret password")
        #expect(one != two)
        #expect(hasher.verify("secret password", against: one))
        #expect(!hasher.verify("secret passwore", against: one))
        #expect(!hasher.needsRehash(one))
        #expect(PasswordHasher(logN: 12).needsRehash(one))
        for bad in [
            "", "secret password", "$scrypt$ln=10,r=8,p=1$$", "$bcrypt$x$y$z", "$scrypt$ln=99,r=8,p=1$AAAA$AAAA",
        ] {
            #expect(!hasher.verify("secret password", against: bad))
        }
    }
}
