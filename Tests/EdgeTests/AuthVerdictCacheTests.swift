import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
import Synchronization
import Testing

@testable import Edge

/// The edge's verdict cache over a real `auth.generation` file, as herald-auth writes it.
@Suite("auth verdict cache", .watchedForStalls)
struct AuthVerdictCacheTests {
    /// A directory with herald-auth's counter in it, and a cache watching it through a socket path there.
    static func withCache(
        _ body: (AuthVerdictCache, SharedGeneration, String, TestClock) throws -> Void
    ) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("verdicts-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let counter = try #require(
            try SharedGeneration(path: "\(directory)/\(SharedGeneration.authFileName)", writable: true))
        let clock = TestClock()
        let cache = AuthVerdictCache(authEndpoints: [.unix("\(directory)/auth.sock")], now: { clock.now })
        try body(cache, counter, directory, clock)
    }

    static let alice = AuthenticateRequest(authorization: "Basic YWxpY2U6YWxpY2U=")

    /// Looks `request` up; on a miss stores `answer` under the generation read, as the edge does.
    static func ask(_ cache: AuthVerdictCache, _ request: AuthenticateRequest = alice, answer: AuthenticateResponse)
        -> Bool
    {
        switch cache.lookup(request) {
        case .hit: return true
        case .miss(let key, let generation):
            if let generation { cache.store(answer, key: key, generation: generation) }
            return false
        }
    }

    @Test("an answer is reused until the counter moves or its time is up; another header or hub is asked for")
    func reuse() throws {
        try Self.withCache { cache, counter, _, clock in
            let answer = AuthenticateResponse(user: "alice", scheme: "basic", cacheUntilUnixMs: 1_060_000)
            #expect(!Self.ask(cache, answer: answer))
            #expect(Self.ask(cache, answer: answer))
            #expect(!Self.ask(cache, AuthenticateRequest(authorization: "Basic Ym9iOmJvYg=="), answer: answer))
            #expect(
                !Self.ask(
                    cache, AuthenticateRequest(authorization: Self.alice.authorization, hub: "default"), answer: answer)
            )
            counter.bump()
            #expect(!Self.ask(cache, answer: answer))
            #expect(Self.ask(cache, answer: answer))
            clock.set(1_060_000)
            #expect(!Self.ask(cache, answer: answer))
        }
    }

    @Test("a SAS answer is reused for its hub and header until the counter moves; never without an audience or a time")
    func sas() throws {
        try Self.withCache { cache, counter, _, _ in
            func ask(_ request: AuthorizeSasRequest, _ answer: AuthorizeSasResponse) -> Bool {
                switch cache.lookup(request) {
                case .hit: return true
                case .miss(let key, let generation):
                    if let generation { cache.store(answer, key: key, generation: generation) }
                    return false
                }
            }
            let token = "SharedAccessSignature sr=h%2Fhub&sig=x&se=2000&skn=k"
            let first = AuthorizeSasRequest(hub: "hub", authorization: token, resource: "h/hub/installations/1")
            var other = first
            other.resource = "h/hub/installations/2"
            let answer = AuthorizeSasResponse(
                keyName: "k", rights: [.listen], audience: "h/hub", cacheUntilUnixMs: 1_060_000)
            #expect(!ask(first, answer))
            #expect(ask(other, answer), "another resource, the same token: the caller checks the audience")
            #expect(!ask(AuthorizeSasRequest(hub: "hub2", authorization: token), answer))
            counter.bump()
            #expect(!ask(first, answer))
            let unscoped = AuthorizeSasRequest(hub: "hub", authorization: token + "x")
            var noAudience = answer
            noAudience.audience = ""
            #expect(!ask(unscoped, noAudience))
            #expect(!ask(unscoped, noAudience))
            var noTime = answer
            noTime.cacheUntilUnixMs = 0
            let untimed = AuthorizeSasRequest(hub: "hub", authorization: token + "y")
            #expect(!ask(untimed, noTime))
            #expect(!ask(untimed, noTime))
        }
    }

    @Test("an answer asked for before a bump is never reused, even if stored after it")
    func raceWithARevocation() throws {
        try Self.withCache { cache, counter, _, _ in
            let answer = AuthenticateResponse(user: "alice", scheme: "bearer", cacheUntilUnixMs: 1_060_000)
            guard case .miss(let key, let generation?) = cache.lookup(Self.alice) else {
                Issue.record("expected a miss with a generation")
                return
            }
            counter.bump()  // auth revoked the token after answering, before the edge kept the answer
            cache.store(answer, key: key, generation: generation)
            #expect(!Self.ask(cache, answer: answer))
        }
    }

    @Test("auth's 0 (or a past time) means ask every time")
    func notCacheable() throws {
        try Self.withCache { cache, _, _, _ in
            let answer = AuthenticateResponse(user: "alice", scheme: "basic", cacheUntilUnixMs: 0)
            #expect(!Self.ask(cache, answer: answer))
            #expect(!Self.ask(cache, answer: answer))
        }
    }

    @Test("a replaced counter file empties the cache within a second")
    func replacedFile() throws {
        try Self.withCache { cache, _, directory, clock in
            let answer = AuthenticateResponse(user: "alice", scheme: "basic", cacheUntilUnixMs: 1_060_000)
            #expect(!Self.ask(cache, answer: answer))
            #expect(Self.ask(cache, answer: answer))
            let path = "\(directory)/\(SharedGeneration.authFileName)"
            try FileManager.default.removeItem(atPath: path)
            _ = try SharedGeneration(path: path, writable: true)
            clock.set(clock.now + 1000)
            #expect(!Self.ask(cache, answer: answer))
        }
    }

    @Test("off when auth is reached over TCP, or its counter file is missing")
    func off() throws {
        let answer = AuthenticateResponse(user: "alice", scheme: "basic", cacheUntilUnixMs: .max)
        let tcp = AuthVerdictCache(authEndpoints: [.unix("/tmp/auth.sock"), .tcp(host: "10.0.0.2", port: 7000)])
        #expect(tcp.paths.isEmpty)
        #expect(!Self.ask(tcp, answer: answer) && !Self.ask(tcp, answer: answer))
        let missing = AuthVerdictCache(authEndpoints: [.unix("/nonexistent-\(UUID().uuidString)/auth.sock")])
        #expect(!Self.ask(missing, answer: answer) && !Self.ask(missing, answer: answer))
    }
}

/// Unix ms that a test sets.
final class TestClock: Sendable {
    private let value = Mutex<Int64>(1_000_000)
    var now: Int64 { value.withLock { $0 } }
    func set(_ now: Int64) { value.withLock { $0 = now } }
}
