import HeraldRPC
import Synchronization

/// Slows down password guessing: after `freeFailures` failed logins in a row for one user name,
/// that name is refused for `lockout`, doubling with each further failure up to `maxLockout`.
///
/// Counts per user name, known or not, so the answer does not reveal which names exist. Kept in
/// memory: a restart forgets it (documented; a shared store would be needed with several auth
/// replicas). The trade-off is the usual one: someone who knows a user name can lock that user out
/// for a while, but cannot guess their password faster than one try per lockout.
public final class LoginThrottle: Sendable {
    public let freeFailures: Int
    public let lockout: Int64
    public let maxLockout: Int64
    /// Failures older than this are forgotten.
    public let window: Int64 = 15 * 60 * 1000
    private let now: @Sendable () -> Int64
    private let state = Mutex<[String: Entry]>([:])
    /// Above this many tracked names, stale ones are dropped (bounds memory under a spray attack).
    private let maxEntries = 100_000

    struct Entry {
        var failures: Int
        var lastFailure: Int64
        var lockedUntil: Int64
    }

    public init(
        freeFailures: Int = 5, lockoutSeconds: Int64 = 30, maxLockoutSeconds: Int64 = 15 * 60,
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) {
        self.freeFailures = freeFailures
        self.lockout = lockoutSeconds * 1000
        self.maxLockout = max(lockoutSeconds, maxLockoutSeconds) * 1000
        self.now = now
    }

    /// Throws RESOURCE_EXHAUSTED ("… retry after <n> s") while `user` is locked out.
    public func check(_ user: String) throws {
        let now = self.now()
        let until = state.withLock { $0[user]?.lockedUntil ?? 0 }
        if until > now {
            let seconds = (until - now + 999) / 1000
            throw ServiceError(.resourceExhausted, "too many failed logins for this user; retry after \(seconds) s")
        }
    }

    public func failed(_ user: String) {
        let now = self.now()
        state.withLock { entries in
            var entry = entries[user] ?? Entry(failures: 0, lastFailure: now, lockedUntil: 0)
            if now - entry.lastFailure > window { entry.failures = 0 }
            entry.failures += 1
            entry.lastFailure = now
            if entry.failures >= freeFailures {
                let doublings = min(entry.failures - freeFailures, 20)
                entry.lockedUntil = now + min(lockout << doublings, maxLockout)
            }
            entries[user] = entry
            if entries.count > maxEntries {
                entries = entries.filter { $0.value.lockedUntil > now || now - $0.value.lastFailure <= window }
            }
        }
    }

    public func succeeded(_ user: String) {
        _ = state.withLock { $0.removeValue(forKey: user) }
    }
}
