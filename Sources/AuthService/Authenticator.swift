import Crypto
import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldService
import Logging
import NIOPosix
import Synchronization

/// Settings of herald-auth, besides ``RuntimeConfig``'s.
///
/// - `auth-mode` (`HERALD_AUTH_MODE`, `accounts`): `accounts` or `tutorial`.
/// - `password-hash-log-n` (`HERALD_PASSWORD_HASH_LOG_N`, 17): scrypt cost, log2 N (r = 8, p = 1).
///   17 is OWASP's minimum (128 MiB and ~0.3 s per hash here); lower only for tests.
/// - `token-ttl-seconds` (`HERALD_TOKEN_TTL_SECONDS`, 3600): lifetime of bearer tokens.
/// - `credential-cache-seconds` (`HERALD_CREDENTIAL_CACHE_SECONDS`, 60): how long a verified Basic
///   credential is remembered (in memory, as an HMAC), so clients that send Basic on every request
///   do not pay a password hash each time; 0 turns it off. A password change clears it.
/// - `verdict-cache-seconds` (`HERALD_VERDICT_CACHE_SECONDS`, 60 on SQLite, 0 on PostgreSQL): how
///   long herald-edge may reuse an Authenticate answer without asking again (never past a bearer
///   token's expiry). It holds only while `auth.generation` beside auth's sockets is unchanged, and
///   auth bumps that counter before answering anything that could change a verdict, so revocation
///   stays immediate. The file is shared memory, so this is strict only when every auth replica
///   sharing the store runs on the edge's host: hence 0 by default on PostgreSQL, whose replicas
///   may not. 0 turns it off.
/// - `max-failed-logins` (`HERALD_MAX_FAILED_LOGINS`, 5) and `lockout-seconds`
///   (`HERALD_LOCKOUT_SECONDS`, 30): see ``LoginThrottle``.
/// - `max-pending-logins` (`HERALD_MAX_PENDING_LOGINS`, 8): password hashes running or waiting at
///   once; more are refused at once with 429 and `Retry-After` (see ``LoginGate``).
/// - `max-login-wait-ms` (`HERALD_MAX_LOGIN_WAIT_MS`, 2000): fewer may wait when the hashes
///   measured so far say they would not finish within this long, and a login is answered within
///   this and one second more (429 when its hash has not finished by then). Keep the sum under
///   the edge's RPC deadline (`rpc-timeout-ms`, 5000).
/// - `failed-login-budget` (`HERALD_FAILED_LOGIN_BUDGET`, 600): failed logins per minute across all
///   user names before logins that need a hash are refused for a while (see ``LoginGate``).
/// - `test-user`, `test-password` (`HERALD_TEST_USER`, `HERALD_TEST_PASSWORD`): with `test-mode`
///   on (accounts mode), an account herald-auth creates, or whose password it sets, at start and
///   after every ResetForTests, so that a test stack has a known user. Refused without `test-mode`.
public struct AuthConfig: Sendable {
    public static let keys: Set<String> = [
        "auth-mode", "password-hash-log-n", "token-ttl-seconds", "credential-cache-seconds", "verdict-cache-seconds",
        "max-failed-logins",
        "lockout-seconds", "max-pending-logins", "failed-login-budget", "max-login-wait-ms",
        "test-user", "test-password",
    ]
    public var mode: AuthMode
    public var passwordHashLogN: Int
    public var tokenTTL: Duration
    public var credentialCache: Duration
    /// `verdict-cache-seconds`; nil: the store's default (60 s on SQLite, 0 on PostgreSQL).
    public var verdictCache: Duration?
    public var maxFailedLogins: Int
    public var lockout: Duration
    public var maxPendingLogins: Int
    public var failedLoginBudget: Int
    public var maxLoginWaitMilliseconds: Int
    /// `test-user` and `test-password`, when set.
    public var testUser: (name: String, password: String)?

    public init(reader: ConfigReader) throws {
        mode = try reader.choice("auth-mode", default: .accounts)
        passwordHashLogN = try reader.int("password-hash-log-n", default: 17)
        let tokenTTLSeconds = try reader.int("token-ttl-seconds", default: 3600)
        let credentialCacheSeconds = try reader.int("credential-cache-seconds", default: 60)
        maxFailedLogins = try reader.int("max-failed-logins", default: 5)
        let lockoutSeconds = try reader.int("lockout-seconds", default: 30)
        maxPendingLogins = try reader.int("max-pending-logins", default: 8)
        failedLoginBudget = try reader.int("failed-login-budget", default: 600)
        maxLoginWaitMilliseconds = try reader.int("max-login-wait-ms", default: 2000)
        guard (1...600_000).contains(maxLoginWaitMilliseconds) else {
            throw ConfigError("max-login-wait-ms must be 1...600000")
        }
        guard (1...10_000).contains(maxPendingLogins) else { throw ConfigError("max-pending-logins must be 1...10000") }
        guard (1...1_000_000).contains(failedLoginBudget) else {
            throw ConfigError("failed-login-budget must be 1...1000000")
        }
        guard (10...22).contains(passwordHashLogN) else { throw ConfigError("password-hash-log-n must be 10...22") }
        // Upper bounds too: these become milliseconds, and an absurd value must be a start-up error, not an overflow.
        guard (1...366 * 86400).contains(tokenTTLSeconds) else {
            throw ConfigError("token-ttl-seconds must be 1...31622400")
        }
        guard (0...86400).contains(credentialCacheSeconds) else {
            throw ConfigError("credential-cache-seconds must be 0...86400")
        }
        if reader.string("verdict-cache-seconds") != nil {
            let seconds = try reader.int("verdict-cache-seconds", default: 0)
            guard (0...86400).contains(seconds) else { throw ConfigError("verdict-cache-seconds must be 0...86400") }
            verdictCache = .seconds(seconds)
        }
        guard (1...1000).contains(maxFailedLogins) else { throw ConfigError("max-failed-logins must be 1...1000") }
        guard (1...86400).contains(lockoutSeconds) else { throw ConfigError("lockout-seconds must be 1...86400") }
        tokenTTL = .seconds(tokenTTLSeconds)
        credentialCache = .seconds(credentialCacheSeconds)
        lockout = .seconds(lockoutSeconds)
        switch (reader.string("test-user"), reader.string("test-password")) {
        case (nil, nil):
            testUser = nil
        case (let name?, let password?):
            guard try reader.bool("test-mode") else {
                throw ConfigError("test-user is only for test stacks: it needs test-mode=true (HERALD_TEST_MODE)")
            }
            guard mode == .accounts else {
                throw ConfigError(
                    "test-user needs auth-mode accounts (in tutorial mode any user whose password is the name logs in)")
            }
            try Authenticator.validate(user: name, password: password)
            testUser = (name, password)
        default:
            throw ConfigError("test-user and test-password go together (HERALD_TEST_USER, HERALD_TEST_PASSWORD)")
        }
    }
}

/// Checks Authorization header values and issues tokens.
///
/// Basic credentials are checked by mode; bearer tokens by their SHA-256 in ``AccountStore``. Failed
/// checks go through ``LoginThrottle``. Nothing here logs or echoes a credential: error messages
/// say what is wrong, never with what.
public final class Authenticator: Sendable {
    public let mode: AuthMode
    public let store: AccountStore
    public let hasher: PasswordHasher
    public let throttle: LoginThrottle
    /// Bounds the hashes waiting and the failed logins per minute across every name.
    public let gate: LoginGate
    /// Lifetime of issued tokens and of cached credentials, in ms.
    private let tokenTTL: Int64
    private let cacheTTL: Int64
    /// How long a caller may reuse an Authenticate answer (`cache_until_unix_ms`), in ms; 0: never.
    /// How long an answer may be reused (ms; 0: never), for Authenticate and AuthorizeSas alike.
    let verdictTTL: Int64
    /// Called once a change that could turn a verdict is made and before it is answered (a failed
    /// login here; the handlers call it for the rest): bumps `auth.generation`.
    public let changed: @Sendable () -> Void
    private let now: @Sendable () -> Int64
    /// Password hashing runs here, not on Swift's cooperative pool: each hash holds a thread for a
    /// third of a second, and the pool's size also bounds the memory scrypt takes at once.
    private let hashingPool: NIOThreadPool
    /// Verified Basic credentials: HMAC(process key, header) → (user, expiry, the hash verified).
    /// With a shared store another replica may change the password meanwhile, so a hit is taken
    /// only while the stored hash is still the one verified (one indexed read, no scrypt).
    private let cache = Mutex<[Data: (user: String, expires: Int64, hash: String)]>([:])
    private let cacheKey = SymmetricKey(size: .bits256)

    public init(
        mode: AuthMode, store: AccountStore, hasher: PasswordHasher = PasswordHasher(),
        throttle: LoginThrottle = LoginThrottle(),
        gate: LoginGate = LoginGate(maxPending: 8, failureBudgetPerMinute: 600),
        tokenTTL: Duration = .seconds(3600), credentialCache: Duration = .seconds(60), verdictCache: Duration = .zero,
        changed: @escaping @Sendable () -> Void = {}, hashingPool: NIOThreadPool = .singleton,
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) throws {
        self.mode = mode
        self.store = store
        self.hasher = hasher
        self.throttle = throttle
        self.gate = gate
        self.tokenTTL = tokenTTL.wholeMilliseconds
        self.cacheTTL = credentialCache.wholeMilliseconds
        self.verdictTTL = verdictCache.wholeMilliseconds
        self.changed = changed
        self.hashingPool = hashingPool
        self.now = now
        // One hash at start, measured: the first logins then queue by a measured hash time, not an
        // unbounded guess, and a login with a name that does not exist waits as long as a hash
        // takes from the first (LoginGate.decoyDelay). Tutorial mode never hashes a password.
        if mode == .accounts {
            let started = ContinuousClock.now
            _ = try hasher.hash(randomHex(words: 2))
            gate.record(hashDuration: ContinuousClock.now - started)
        }
    }

    /// The principal named by `header`, or UNAUTHENTICATED saying what is wrong; `source` is the
    /// caller's address ("" when unknown), which shares out password hashing (``LoginGate``).
    public func authenticate(_ header: String, from source: String = "") async throws -> AuthenticateResponse {
        switch try Credentials.parse(header) {
        case .basic(let user, let password):
            try await checkPassword(user: user, password: password, source: source)
            return AuthenticateResponse(user: user, scheme: "basic", cacheUntilUnixMs: cacheUntil())
        case .bearer(let token):
            guard let live = try await store.tokenUser(hash: Self.tokenHash(token)) else {
                throw ServiceError.unauthenticated("the bearer token is unknown, expired or revoked")
            }
            return AuthenticateResponse(user: live.user, scheme: "bearer", cacheUntilUnixMs: cacheUntil(live.expiresAt))
        }
    }

    /// Until when a caller may reuse an answer given now (`cache_until_unix_ms`): `verdictTTL` from
    /// now, never past `limit` (a token's expiry); 0 when verdicts are not to be reused.
    private func cacheUntil(_ limit: Int64 = .max) -> Int64 {
        verdictTTL > 0 ? min(now() + verdictTTL, limit) : 0
    }

    /// A new bearer token for the user named by Basic credentials in `header`.
    public func issueToken(_ header: String, from source: String = "") async throws -> IssueTokenResponse {
        guard case .basic(let user, let password) = try Credentials.parse(header) else {
            throw ServiceError.unauthenticated("a token is issued for Basic credentials (user name and password)")
        }
        try await checkPassword(user: user, password: password, source: source)
        let bytes = SecureRandom.bytes(32)
        let token =
            "hrd_"
            + Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        let expires = now() + tokenTTL
        try await store.insertToken(hash: Self.tokenHash(token), user: user, expiresAt: expires)
        return IssueTokenResponse(token: token, user: user, expiresAtUnixMs: expires)
    }

    public func revokeToken(_ token: String) async throws -> Int64 {
        try await store.revokeToken(hash: Self.tokenHash(token))
    }

    // MARK: accounts

    public func createUser(_ user: String, password: String) async throws -> User {
        try Self.validate(user: user, password: password)
        let hash = try await hashingPool.runIfActive { [hasher] in try hasher.hash(password) }
        return try await store.createUser(user, passwordHash: hash)
    }

    public func setPassword(_ user: String, password: String) async throws -> User {
        try Self.validate(user: user, password: password)
        let hash = try await hashingPool.runIfActive { [hasher] in try hasher.hash(password) }
        let updated = try await store.setPasswordHash(user, hash, revokeTokens: true)
        forget(user)
        return updated
    }

    public func deleteUser(_ user: String) async throws {
        try await store.deleteUser(user)
        forget(user)
    }

    /// Erase: the account, its tokens, its lockout and its cached credentials; an unknown user
    /// erases nothing and succeeds. Returns how many rows went.
    public func eraseUser(_ user: String) async throws -> Int64 {
        let removed = try await store.eraseUser(user)
        try await throttle.succeeded(user)
        forget(user)
        return removed
    }

    /// Whether `user` can log in: an account (accounts mode) or any valid name (tutorial mode).
    public func userExists(_ user: String) async throws -> Bool {
        guard Names.isValidUserName(user) else {
            throw ServiceError.invalidArgument("user names are \(Names.userNameRule)")
        }
        return mode == .tutorial ? true : try await store.userExists(user)
    }

    public func revokeTokens(of user: String) async throws -> Int64 {
        if mode == .accounts, try await !store.userExists(user) {
            throw ServiceError.notFound("user \(user) not found")
        }
        return try await store.revokeTokens(of: user)
    }

    // MARK: passwords

    /// Checks one user name and password against the mode's rule, through the throttle; `source`
    /// is the caller's address, for ``LoginGate``'s share per source.
    func checkPassword(user: String, password: String, source: String) async throws {
        try await throttle.check(user)
        let valid: Bool
        switch mode {
        case .tutorial:
            valid = try await settle(user, valid: user == password)
        case .accounts:
            let key = Data(HMAC<SHA256>.authenticationCode(for: Data("\(user)\u{0}\(password)".utf8), using: cacheKey))
            var cached = false
            if cacheTTL > 0, let hit = cache.withLock({ $0[key] }), hit.user == user, hit.expires > now() {
                if store.isShared {
                    cached = try await store.passwordHash(of: user) == hit.hash
                } else {
                    cached = true
                }
            }
            if cached {
                valid = try await settle(user, valid: true)
            } else if let stored = try await store.passwordHash(of: user) {
                let ticket = try gate.enter(from: source)
                // The verdict is reached in a task of its own, which gives the slot back and counts
                // the failure or success whatever becomes of this call; the caller is answered by
                // the gate's deadline at the latest (429 then, never the edge's 503).
                valid = try await LoginGate.answer(by: gate.answerDeadline(ticket)) {
                    try await self.verify(user, password, stored: stored, key: key, ticket: ticket)
                }
            } else {
                // No such name: no hash, no slot, no share of the failed-login budget, so a spray
                // of made-up names cannot keep real users out, even from their own address. It is
                // answered as a wrong password is: the gate's refusals as they stand now, else
                // 401 after as long as a hash takes (LoginGate.withoutHash).
                try await gate.withoutHash(from: source)
                valid = try await settle(user, valid: false)
            }
        }
        guard valid else { throw ServiceError.unauthenticated("wrong user name or password") }
    }

    /// Hashes `password` against `user`'s stored hash in `ticket`'s slot, then settles the
    /// verdict: the slot given back, a success remembered under `key`, the throttle told.
    private func verify(_ user: String, _ password: String, stored encoded: String, key: Data, ticket: LoginGate.Ticket)
        async throws -> Bool
    {
        let matches: Bool
        let hashDuration: Duration
        do {
            (matches, hashDuration) = try await hashingPool.runIfActive { [hasher, gate] in
                try gate.starting(ticket)
                let started = ContinuousClock.now
                return (hasher.verify(password, against: encoded), ContinuousClock.now - started)
            }
        } catch {
            gate.leave(ticket, failed: false)
            throw error
        }
        let valid = matches
        gate.leave(ticket, failed: !valid, hashDuration: hashDuration)
        if valid, cacheTTL > 0 {
            let now = self.now()
            cache.withLock { entries in
                if entries.count > 10_000 { entries = entries.filter { $0.value.expires > now } }
                entries[key] = (user, now + cacheTTL, encoded)
            }
        }
        if valid, hasher.needsRehash(encoded) {
            // Parameters were raised since this hash was made: upgrade it now that we know the password.
            if let upgraded = try? await hashingPool.runIfActive({ [hasher] in try hasher.hash(password) }) {
                _ = try? await store.setPasswordHash(user, upgraded, revokeTokens: false)
            }
        }
        return try await settle(user, valid: valid)
    }

    /// Tells the throttle of a verdict; returns it.
    private func settle(_ user: String, valid: Bool) async throws -> Bool {
        if valid {
            try await throttle.succeeded(user)
        } else {
            // Counted toward a lockout, which must also stop the edge reusing this user's verdicts.
            defer { changed() }
            try await throttle.failed(user)
        }
        return valid
    }

    /// Creates `user` with `password`, or sets the password of the existing account.
    public func ensureUser(_ user: String, password: String) async throws {
        if try await store.userExists(user) {
            _ = try await setPassword(user, password: password)
        } else {
            _ = try await createUser(user, password: password)
        }
    }

    /// Deletes every account and token and forgets cached credentials and lockouts (ResetForTests).
    public func deleteEverything() async throws -> Int64 {
        let deleted = try await store.deleteEverything()
        cache.withLock { $0 = [:] }
        try await throttle.forgetAll()
        return deleted
    }

    private func forget(_ user: String) {
        cache.withLock { entries in entries = entries.filter { $0.value.user != user } }
    }

    static func validate(user: String, password: String) throws {
        guard Names.isValidUserName(user) else {
            throw ServiceError.invalidArgument("user names are 1 to 64 characters of A-Z a-z 0-9 _ @ # . -")
        }
        guard (8...1024).contains(password.utf8.count) else {
            throw ServiceError.invalidArgument("passwords are 8 to 1024 bytes")
        }
    }

    static func tokenHash(_ token: String) -> Data {
        Data(SHA256.hash(data: Data(token.utf8)))
    }
}

/// An Authorization header value, parsed.
public enum Credentials: Sendable, Equatable {
    case basic(user: String, password: String)
    case bearer(String)

    /// Parses `header`; UNAUTHENTICATED saying what is wrong (never echoing it).
    public static func parse(_ header: String) throws -> Credentials {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { throw ServiceError.unauthenticated("missing Authorization header") }
        let parts = trimmed.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2 else { throw ServiceError.unauthenticated("malformed Authorization header") }
        let value = parts[1].trimmingCharacters(in: .whitespaces)
        switch parts[0].lowercased() {
        case "basic":
            guard let data = Data(base64Encoded: value), let decoded = String(data: data, encoding: .utf8),
                let colon = decoded.firstIndex(of: ":")
            else {
                throw ServiceError.unauthenticated("malformed Basic credentials; expected base64(user:password)")
            }
            let user = String(decoded[..<colon])
            guard Names.isValidUserName(user) else {
                throw ServiceError.unauthenticated("user names are 1 to 64 characters of A-Z a-z 0-9 _ @ # . -")
            }
            return .basic(user: user, password: String(decoded[decoded.index(after: colon)...]))
        case "bearer":
            guard (1...256).contains(value.utf8.count) else {
                throw ServiceError.unauthenticated("malformed bearer token")
            }
            return .bearer(value)
        default:
            throw ServiceError.unauthenticated("unsupported authorization scheme; use Basic or Bearer")
        }
    }
}
