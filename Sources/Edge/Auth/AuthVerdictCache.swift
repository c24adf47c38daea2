import Crypto
import Foundation
public import HeraldModel
import HeraldProto
public import HeraldRPC
import HeraldService
import Metrics
import NotificationHubs
import Synchronization

/// herald-auth's recent Authenticate and AuthorizeSas answers, so that most requests make one RPC,
/// not two.
///
/// An answer is reused for the same Authorization value and hub until its `cache_until_unix_ms`
/// (auth's `verdict-cache-seconds`, never past a token's expiry), and only while every
/// `auth.generation` counter beside auth's sockets still reads what it read before the answer was
/// asked for. herald-auth bumps that counter before it answers any change that could turn a
/// verdict (see ``SharedGeneration``), so a revoked token or a changed password is refused by the
/// next request, exactly as without the cache. Failures are never kept: each one reaches auth,
/// whose lockouts and failure budget see every wrong password.
///
/// The counters are shared memory, so the cache is on only when every auth replica the edge calls
/// is a Unix socket (same host) whose directory holds one; over TCP it is off. Keys are SHA-256 of
/// a per-process secret, the hub and the header, so no password or token is kept in the clear.
///
/// An AuthorizeSas answer is reused the same way for the same hub and `Authorization` value, on a
/// request whose resource its `audience` covers (``SASAudience``): one NH token signs every request
/// of a back end for its lifetime, and each request names another resource (an installation id).
public final class AuthVerdictCache: Sendable {
    /// The counter files watched; empty: never cache.
    let paths: [String]
    /// SHA-256 having absorbed a random 64-byte block: each key costs the compressions of the hub
    /// and header alone. (An HMAC, as auth's own cache uses, measured 38k instructions per request
    /// here, most of it generic metadata look-ups; this is under a tenth of that. A secret prefix
    /// is a sound MAC for lookups whose keys no one sees.)
    private let salted: SHA256
    private let state = Mutex(State())
    private let now: @Sendable () -> Int64
    /// More distinct credentials than this at once and the oldest are not worth keeping.
    static let capacity = 10_000

    struct State {
        var counters: [SharedGeneration]?
        /// When the counter files were last opened or checked, Unix ms; nil: never yet.
        var checkedAt: Int64?
        var entries: [Key: Entry] = [:]
        var sasEntries: [Key: SASEntry] = [:]
    }

    /// A SHA-256 digest as four words: a concrete type, so no generic metadata per look-up.
    struct Key: Hashable {
        var words: (UInt64, UInt64, UInt64, UInt64)

        static func == (a: Key, b: Key) -> Bool { a.words == b.words }
        func hash(into hasher: inout Hasher) { hasher.combine(words.0) }
    }

    struct Entry {
        var answer: AuthenticateResponse
        var until: Int64
        var generation: UInt64
    }

    struct SASEntry {
        var answer: AuthorizeSasResponse
        var until: Int64
        var generation: UInt64
    }

    /// Watches `auth.generation` in the directory of each socket in `endpoints`; none (never
    /// caches) when any endpoint is a TCP address.
    public init(authEndpoints endpoints: [RPCEndpoint], now: @escaping @Sendable () -> Int64 = unixMillis) {
        var paths: [String] = []
        for endpoint in endpoints {
            guard case .unix(let socket) = endpoint else {
                paths = []
                break
            }
            let path = SharedGeneration.authPath(besideSocket: socket)
            if !paths.contains(path) { paths.append(path) }
        }
        self.paths = paths
        self.now = now
        var salted = SHA256()
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<8).map { _ in generator.next() as UInt64 }
        secret.withUnsafeBytes { salted.update(bufferPointer: $0) }
        self.salted = salted
    }

    /// A cache that never caches (route tests over fake services).
    public static let off = AuthVerdictCache(authEndpoints: [])

    /// What the edge knows before asking auth: a reusable answer, or the generation to store the
    /// next answer under (nil: do not store it).
    enum Lookup {
        case hit(AuthenticateResponse)
        case miss(key: Key, generation: UInt64?)
    }

    func lookup(_ request: AuthenticateRequest) -> Lookup {
        guard !paths.isEmpty else { return .miss(key: Key(words: (0, 0, 0, 0)), generation: nil) }
        let key = key(request)
        let now = self.now()
        return state.withLock { state in
            guard let generation = Self.generation(&state, paths: paths, now: now) else {
                return .miss(key: key, generation: nil)
            }
            if let entry = state.entries[key] {
                if entry.generation == generation, entry.until > now { return .hit(entry.answer) }
                state.entries[key] = nil
            }
            return .miss(key: key, generation: generation)
        }
    }

    func key(_ request: AuthenticateRequest) -> Key { key(hub: request.hub, header: request.authorization) }

    func key(hub: String, header: String) -> Key {
        var hasher = salted
        var hub = hub
        var header = header
        hub.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        withUnsafeBytes(of: UInt8.zero) { hasher.update(bufferPointer: $0) }
        header.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        return hasher.finalize().withUnsafeBytes { digest in
            Key(
                words: (
                    digest.loadUnaligned(fromByteOffset: 0, as: UInt64.self),
                    digest.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                    digest.loadUnaligned(fromByteOffset: 16, as: UInt64.self),
                    digest.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
                ))
        }
    }

    /// Keeps `answer`, asked for under `generation`: if the counters moved meanwhile, the first
    /// lookup drops it.
    func store(_ answer: AuthenticateResponse, key: Key, generation: UInt64) {
        let now = self.now()
        guard answer.cacheUntilUnixMs > now else { return }
        state.withLock { state in
            if state.entries.count >= Self.capacity {
                state.entries = state.entries.filter { $0.value.until > now && $0.value.generation == generation }
                if state.entries.count >= Self.capacity { state.entries.removeAll(keepingCapacity: true) }
            }
            state.entries[key] = Entry(answer: answer, until: answer.cacheUntilUnixMs, generation: generation)
        }
    }

    /// What the edge knows before asking auth about a SAS token: auth's answer for this hub and
    /// header while reusable (the caller still checks that its audience covers the request's
    /// resource), or the generation to store the next answer under (nil: do not store it).
    enum SASLookup {
        case hit(AuthorizeSasResponse)
        case miss(key: Key, generation: UInt64?)
    }

    func lookup(_ request: AuthorizeSasRequest) -> SASLookup {
        guard !paths.isEmpty else { return .miss(key: Key(words: (0, 0, 0, 0)), generation: nil) }
        let key = key(hub: request.hub, header: request.authorization)
        let now = self.now()
        return state.withLock { state in
            guard let generation = Self.generation(&state, paths: paths, now: now) else {
                return .miss(key: key, generation: nil)
            }
            if let entry = state.sasEntries[key] {
                if entry.generation == generation, entry.until > now { return .hit(entry.answer) }
                state.sasEntries[key] = nil
            }
            return .miss(key: key, generation: generation)
        }
    }

    /// Keeps a SAS `answer`, asked for under `generation`, until its `cache_until_unix_ms`.
    func store(_ answer: AuthorizeSasResponse, key: Key, generation: UInt64) {
        let now = self.now()
        guard answer.cacheUntilUnixMs > now, !answer.audience.isEmpty else { return }
        state.withLock { state in
            if state.sasEntries.count >= Self.capacity {
                state.sasEntries = state.sasEntries.filter { $0.value.until > now && $0.value.generation == generation }
                if state.sasEntries.count >= Self.capacity { state.sasEntries.removeAll(keepingCapacity: true) }
            }
            state.sasEntries[key] = SASEntry(answer: answer, until: answer.cacheUntilUnixMs, generation: generation)
        }
    }

    /// The sum of the counters, opening them when needed and checking once a second that they are
    /// still the files at their paths; nil while any is missing.
    private static func generation(_ state: inout State, paths: [String], now: Int64) -> UInt64? {
        if state.checkedAt.map({ now < $0 || now - $0 >= 1000 }) ?? true {
            state.checkedAt = now
            let same = state.counters.map { zip($0, paths).allSatisfy { $0.isStillAt(path: $1) } } ?? false
            if !same {
                state.entries.removeAll()
                state.sasEntries.removeAll()
                let opened = paths.compactMap { try? SharedGeneration(path: $0, writable: false) }
                state.counters = opened.count == paths.count ? opened : nil
            }
        }
        guard let counters = state.counters else { return nil }
        var sum: UInt64 = 0
        for counter in counters { sum &+= counter.load() }
        return sum
    }

    /// Where each verdict came from: `herald_edge_auth_verdicts_total{source="cache"|"auth"}`.
    static let fromCache = Counter(label: "herald_edge_auth_verdicts_total", dimensions: [("source", "cache")])
    static let fromAuth = Counter(label: "herald_edge_auth_verdicts_total", dimensions: [("source", "auth")])
}
