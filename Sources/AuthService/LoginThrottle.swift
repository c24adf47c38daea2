import HeraldModel
import HeraldRPC
import HeraldSQL
import HeraldService
import NIOCore
import Synchronization

/// Slows down password guessing: after `freeFailures` failed logins in a row for one user name,
/// that name is refused for `lockout`, doubling with each further failure up to `maxLockout`.
///
/// Counts per user name, known or not, so the answer does not reveal which names exist. The counts
/// live in a ``LockoutLedger``: in memory for one process, written through to herald-auth's SQLite
/// file so that a restart keeps them (``KeptLockoutLedger``), or in the database that auth
/// replicas share, so that failures spread over replicas add up and a lockout
/// holds whichever replica a request reaches. The trade-off is the usual one: someone who knows a
/// user name can lock that user out for a while, but cannot guess their password faster than one
/// try per lockout.
public final class LoginThrottle: Sendable {
    public let policy: LockoutPolicy
    public let ledger: any LockoutLedger
    private let now: @Sendable () -> Int64

    public init(
        freeFailures: Int = 5, lockout: Duration = .seconds(30), maxLockout: Duration = .seconds(15 * 60),
        ledger: any LockoutLedger = MemoryLockoutLedger(), now: @escaping @Sendable () -> Int64 = unixMillis
    ) {
        self.policy = LockoutPolicy(
            freeFailures: freeFailures, lockout: lockout.wholeMilliseconds,
            maxLockout: max(lockout, maxLockout).wholeMilliseconds)
        self.ledger = ledger
        self.now = now
    }

    public var freeFailures: Int { policy.freeFailures }

    /// Throws RESOURCE_EXHAUSTED with `retry-after` (seconds) while `user` is locked out.
    nonisolated(nonsending) public func check(_ user: String) async throws {
        let now = self.now()
        let until = try await ledger.lockedUntil(user)
        if until > now {
            let seconds = (until - now + 999) / 1000
            throw ServiceError.resourceExhausted(
                "too many failed logins for this user; retry after \(seconds) s", retryAfterSeconds: Int(seconds))
        }
    }

    nonisolated(nonsending) public func failed(_ user: String) async throws {
        try await ledger.recordFailure(user, now: now(), policy: policy)
    }

    nonisolated(nonsending) public func succeeded(_ user: String) async throws {
        try await ledger.clear(user)
    }

    /// Forgets every failure and lockout.
    nonisolated(nonsending) public func forgetAll() async throws {
        try await ledger.clearAll()
    }
}

/// How failures turn into lockouts.
public struct LockoutPolicy: Sendable {
    public var freeFailures: Int
    /// The first lockout, in ms; each further failure doubles it, up to `maxLockout`.
    public var lockout: Int64
    public var maxLockout: Int64
    /// Failures older than this are forgotten, in ms.
    public var window: Int64 = Self.defaultWindow
    public static let defaultWindow: Int64 = 15 * 60 * 1000

    /// The lockout after the `failures`-th failure in a row, from `now`; 0 while below the free ones.
    func lockedUntil(failures: Int, now: Int64) -> Int64 {
        guard failures >= freeFailures else { return 0 }
        return now + min(lockout << min(failures - freeFailures, 20), maxLockout)
    }
}

/// Where a ``LoginThrottle`` keeps its counts. Its requirements run on the caller's executor: the
/// memory ledger answers Authenticate on the event loop without a hop.
public protocol LockoutLedger: Sendable {
    /// Unix ms until which `name` is refused; 0 when it is not.
    nonisolated(nonsending) func lockedUntil(_ name: String) async throws -> Int64
    nonisolated(nonsending) func recordFailure(_ name: String, now: Int64, policy: LockoutPolicy) async throws
    nonisolated(nonsending) func clear(_ name: String) async throws
    nonisolated(nonsending) func clearAll() async throws
}

/// Counts in this process's memory: one auth process (SQLite), forgotten on restart.
public final class MemoryLockoutLedger: LockoutLedger {
    private let state = Mutex<[String: Entry]>([:])
    /// Above this many tracked names, stale ones are dropped (bounds memory under a spray attack).
    private let maxEntries = 100_000

    struct Entry {
        var failures: Int
        var lastFailure: Int64
        var lockedUntil: Int64
    }

    public init() {}

    public func lockedUntil(_ name: String) -> Int64 {
        state.withLock { $0[name]?.lockedUntil ?? 0 }
    }

    public func recordFailure(_ name: String, now: Int64, policy: LockoutPolicy) {
        _ = record(name, now: now, policy: policy)
    }

    /// Counts a failure and returns the name's entry after it.
    func record(_ name: String, now: Int64, policy: LockoutPolicy) -> Entry {
        state.withLock { entries in
            var entry = entries[name] ?? Entry(failures: 0, lastFailure: now, lockedUntil: 0)
            if now - entry.lastFailure > policy.window { entry.failures = 0 }
            entry.failures += 1
            entry.lastFailure = now
            entry.lockedUntil = max(entry.lockedUntil, policy.lockedUntil(failures: entry.failures, now: now))
            entries[name] = entry
            if entries.count > maxEntries {
                entries = entries.filter { $0.value.lockedUntil > now || now - $0.value.lastFailure <= policy.window }
            }
            return entry
        }
    }

    /// Puts back an entry read from storage.
    func restore(_ name: String, _ entry: Entry) {
        state.withLock { $0[name] = entry }
    }

    public func clear(_ name: String) {
        _ = state.withLock { $0.removeValue(forKey: name) }
    }

    /// Forgets `name`; whether there was anything to forget.
    func remove(_ name: String) -> Bool {
        state.withLock { $0.removeValue(forKey: name) != nil }
    }

    public func clearAll() {
        state.withLock { $0 = [:] }
    }
}

/// The `lockout` table (``AuthSchema``): one row per name with failures, written through by
/// ``KeptLockoutLedger`` or used directly by ``SharedLockoutLedger``.
struct LockoutTable: Sendable {
    let db: any SQLDatabase

    /// The entries that still lock or still count (`window`, in ms).
    nonisolated(nonsending) func active(now: Int64, window: Int64) async throws
        -> [(name: String, entry: MemoryLockoutLedger.Entry)]
    {
        try await db.query(
            """
            SELECT name, failures, last_failure, locked_until FROM lockout
            WHERE locked_until > \(now) OR last_failure > \(now - window)
            """
        ) { row in
            (
                try row[0],
                MemoryLockoutLedger.Entry(failures: try row[1], lastFailure: try row[2], lockedUntil: try row[3])
            )
        }
    }

    nonisolated(nonsending) func lockedUntil(_ name: String) async throws -> Int64 {
        try await db.queryFirst("SELECT locked_until FROM lockout WHERE name = \(name)").map { try $0[0] } ?? 0
    }

    nonisolated(nonsending) func put(_ name: String, _ entry: MemoryLockoutLedger.Entry) async throws {
        try await db.execute(
            """
            INSERT INTO lockout (name, failures, last_failure, locked_until)
            VALUES (\(name), \(entry.failures), \(entry.lastFailure), \(entry.lockedUntil))
            ON CONFLICT (name) DO UPDATE SET failures = excluded.failures, last_failure = excluded.last_failure,
                locked_until = excluded.locked_until
            """)
    }

    /// Counts a failure in the table itself, for processes that share it: the row is made first
    /// and then read for update, so two replicas' failures for one name queue on it and both count.
    nonisolated(nonsending) func recordFailure(_ name: String, now: Int64, policy: LockoutPolicy) async throws {
        try await db.transaction { session in
            try await session.execute(
                """
                INSERT INTO lockout (name, failures, last_failure, locked_until) VALUES (\(name), 0, \(now), 0)
                ON CONFLICT (name) DO NOTHING
                """)
            guard
                let row = try await session.queryFirst(
                    "SELECT failures, last_failure, locked_until FROM lockout WHERE name = \(name) \(.forUpdate)")
            else { return }
            let (failures, lastFailure, lockedUntil): (Int, Int64, Int64) = (try row[0], try row[1], try row[2])
            let count = (now - lastFailure > policy.window ? 0 : failures) + 1
            let until = max(lockedUntil, policy.lockedUntil(failures: count, now: now))
            try await session.execute(
                """
                UPDATE lockout SET failures = \(Int64(clamping: count)), last_failure = \(now), locked_until = \(until)
                WHERE name = \(name)
                """)
        }
    }

    nonisolated(nonsending) func delete(_ name: String) async throws {
        try await db.execute("DELETE FROM lockout WHERE name = \(name)")
    }

    nonisolated(nonsending) func deleteAll() async throws {
        try await db.execute("DELETE FROM lockout")
    }

    /// Deletes rows that lock nothing and whose failures are forgotten; returns how many.
    nonisolated(nonsending) func purge(now: Int64, window: Int64) async throws -> Int {
        try await db.execute("DELETE FROM lockout WHERE locked_until < \(now) AND last_failure < \(now - window)")
    }
}

/// One auth process's lockouts (SQLite): answered from memory, every change written through to the
/// `lockout` table, and read back at start, so that restarting herald-auth (or crashing it) no
/// longer wipes the lockouts a password guesser has earned. A successful login costs a write only
/// when its name had failures. Writes are bounded by the failed-login budget.
public final class KeptLockoutLedger: LockoutLedger {
    private let table: LockoutTable
    private let memory = MemoryLockoutLedger()

    /// Reads back the entries that still lock or still count (`window`, in ms). The schema must
    /// have been migrated (``AccountStore``).
    public init(db: any SQLDatabase, now: Int64 = unixMillis(), window: Int64 = LockoutPolicy.defaultWindow)
        async throws
    {
        table = LockoutTable(db: db)
        for (name, entry) in try await table.active(now: now, window: window) { memory.restore(name, entry) }
    }

    public func lockedUntil(_ name: String) -> Int64 {
        memory.lockedUntil(name)
    }

    public func recordFailure(_ name: String, now: Int64, policy: LockoutPolicy) async throws {
        try await table.put(name, memory.record(name, now: now, policy: policy))
    }

    public func clear(_ name: String) async throws {
        guard memory.remove(name) else { return }
        try await table.delete(name)
    }

    public func clearAll() async throws {
        memory.clearAll()
        try await table.deleteAll()
    }

    /// Deletes rows that lock nothing and whose failures are forgotten; returns how many.
    public func purge(now: Int64, window: Int64) async throws -> Int {
        try await table.purge(now: now, window: window)
    }
}

/// Lockouts of auth replicas that share one database (PostgreSQL): counted in the table, so that
/// failures spread over replicas add up and a lockout holds on every replica.
public final class SharedLockoutLedger: LockoutLedger {
    private let table: LockoutTable

    /// The schema must have been migrated (``AccountStore``).
    public init(db: any SQLDatabase) {
        table = LockoutTable(db: db)
    }

    public func lockedUntil(_ name: String) async throws -> Int64 {
        try await table.lockedUntil(name)
    }

    public func recordFailure(_ name: String, now: Int64, policy: LockoutPolicy) async throws {
        try await table.recordFailure(name, now: now, policy: policy)
    }

    public func clear(_ name: String) async throws {
        try await table.delete(name)
    }

    public func clearAll() async throws {
        try await table.deleteAll()
    }

    /// Deletes rows that lock nothing and whose failures are forgotten; returns how many.
    public func purge(now: Int64, window: Int64) async throws -> Int {
        try await table.purge(now: now, window: window)
    }
}

/// Keeps slow password hashing from turning into a login outage.
///
/// Each hash holds a thread for a third of a second. Without a bound, a spray of logins with many
/// different names (which ``LoginThrottle``'s per-name count does not slow) queues behind the hash
/// threads, and a real user's login waits past the edge's deadline (503). Three bounds instead:
/// - at most `maxPending` hashes run or wait at once, and no more than would finish within
///   `maxWait` at the hash time measured so far on `threads` threads (so a loaded machine, where
///   each hash takes longer, queues fewer); the next is refused at once with RESOURCE_EXHAUSTED
///   "too many logins in progress; retry after 1 s" (429 with `Retry-After` at the edge). A login
///   admitted but still waiting for a thread when `maxWait` has passed (the machine slowed down
///   after it was admitted) is refused when its turn comes ("login waited too long for its turn"),
///   instead of answering after the caller's deadline.
///   And an admitted login is answered within `maxAnswer` (`maxWait` and a second) whatever its
///   hash does: past it, RESOURCE_EXHAUSTED "login still being checked; retry after 1 s", while the
///   hash finishes on its own and its verdict still counts, so a right password's retry is served
///   from the cache (``answer(by:_:)``);
/// - a global budget of `failureBudget` failed logins per minute, across every name (a token
///   bucket); while it is spent, logins that need a hash are refused until it refills. Cached
///   credentials and bearer tokens need no hash and keep working;
/// - a fair share per source address (the edge passes the caller's): one address holds at most
///   half of the slots the two rules above allow, and spends at most half of the budget, so a
///   spray from one source leaves the other half to everyone else. The empty address (callers
///   that are not the edge, which reach auth's socket and are trusted) is not shared out. At most
///   `maxSources` addresses are tracked; past that, idle ones are forgotten, and a newcomer that
///   still finds no room is counted with the unnamed source.
///
/// A name that does not exist takes no slot and spends no budget: it meets the refusals a real
/// name would meet at that moment, else is answered 401 after as long as a hash takes
/// (``withoutHash(from:)``). So a spray of made-up names, from an address real users share
/// (a NAT, a campus), costs no hashing and cannot keep them out; and neither status nor timing
/// tells whether a name exists. What the gate bounds is the guessing that could succeed.
public final class LoginGate: Sendable {
    public let maxPending: Int
    public let failureBudget: Int
    /// Longest a login may expect to wait for its hash, in milliseconds.
    public let maxWait: Double
    /// Longest from admission to answer, in milliseconds: `maxWait` and one second for the hash
    /// itself unless set (see ``answerDeadline(_:)``).
    public let maxAnswer: Double
    /// Hashing threads (the pool's size).
    public let threads: Int
    /// Most source addresses tracked at once.
    public let maxSources: Int
    private let now: @Sendable () -> Int64
    private let state: Mutex<State>

    /// A failed-login budget: `tokens` of `capacity`, refilling evenly over a minute. The server's
    /// and each source's are the same kind.
    struct Bucket {
        var tokens: Double
        var refilledAt: Int64

        mutating func refill(_ now: Int64, capacity: Double) {
            let elapsed = max(0, now - refilledAt)
            tokens = min(capacity, tokens + Double(elapsed) * capacity / 60_000)
            refilledAt = now
        }
    }

    struct State {
        var pending = 0
        var budget: Bucket
        /// Moving average of one hash's duration in milliseconds; 0 until the first is measured.
        var hashMillis: Double = 0
        var sources: [String: Source] = [:]
        /// When idle sources were last swept (a sweep reads them all: at most once a second).
        var sweptAt: Int64?
    }

    /// One address's share: its hashes in progress and its own failed-login bucket.
    struct Source {
        var pending = 0
        var budget: Bucket
    }

    /// A slot taken by ``enter(from:)``; give it back with ``leave(_:failed:hashDuration:)``.
    public struct Ticket: Sendable {
        /// The source it is counted against; "" when not shared out.
        public let source: String
        public let admitted: ContinuousClock.Instant
    }

    public init(
        maxPending: Int, failureBudgetPerMinute: Int, maxWaitMilliseconds: Int = 2000,
        maxAnswerMilliseconds: Int? = nil, threads: Int = System.coreCount, maxSources: Int = 10_000,
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) {
        self.maxPending = max(1, maxPending)
        self.failureBudget = max(1, failureBudgetPerMinute)
        self.maxWait = Double(max(1, maxWaitMilliseconds))
        self.maxAnswer = maxAnswerMilliseconds.map { Double(max(1, $0)) } ?? maxWait + 1000
        self.threads = max(1, threads)
        self.maxSources = max(1, maxSources)
        self.now = now
        self.state = Mutex(State(budget: Bucket(tokens: Double(max(1, failureBudgetPerMinute)), refilledAt: now())))
    }

    /// One source's share of the failed-login budget per minute.
    var sourceBudget: Double { Double(max(1, failureBudget / 2)) }

    /// Takes a hashing slot for a login from `source` (the caller's address; "" for none) or throws
    /// RESOURCE_EXHAUSTED; pair every success with ``leave(_:failed:hashDuration:)``.
    @discardableResult
    public func enter(from source: String = "") throws -> Ticket {
        let now = self.now()
        let admitted: Result<String, ServiceError> = state.withLock { state in
            let (refusal, capacity) = serverCheck(&state, now)
            if let refusal { return .failure(refusal) }
            let key = Self.isShared(source) ? track(source, in: &state, now) : ""
            if !key.isEmpty, var entry = state.sources[key] {
                let refusal = sourceRefusal(&entry, capacity: capacity, now)
                if refusal == nil { entry.pending += 1 }
                state.sources[key] = entry
                if let refusal { return .failure(refusal) }
            }
            state.pending += 1
            return .success(key)
        }
        switch admitted {
        case .success(let key): return Ticket(source: key, admitted: .now)
        case .failure(let refusal): throw refusal
        }
    }

    /// A login that needs no hash (its name does not exist) meets what a hashed one would meet
    /// now: the refusals ``enter(from:)`` would give it, without a slot taken or the source
    /// tracked, else as long a wait (``decoyDelay()``), and past `maxAnswer` ``stillChecking``.
    /// Else its status or its timing would tell the names apart.
    public func withoutHash(from source: String = "") async throws {
        let now = self.now()
        let refusal: ServiceError? = state.withLock { state in
            let (refusal, capacity) = serverCheck(&state, now)
            if let refusal { return refusal }
            guard Self.isShared(source), var entry = state.sources[source] else { return nil }
            return sourceRefusal(&entry, capacity: capacity, now)
        }
        if let refusal { throw refusal }
        let delay = decoyDelay()
        let bound = Duration.milliseconds(Int64(maxAnswer))
        try await Task.sleep(for: min(delay, bound))
        if delay > bound { throw Self.stillChecking }
    }

    /// How long a login whose name does not exist waits before its 401: as long as a hash takes
    /// now (the measured average, and the wait for a thread behind the hashes in progress), give
    /// or take 15%, so that timing does not tell the names apart either; at most just past
    /// `maxAnswer`.
    public func decoyDelay() -> Duration {
        let (hashMillis, pending) = state.withLock { ($0.hashMillis, $0.pending) }
        let base = hashMillis > 0 ? hashMillis : 50
        let wait = base * (1 + Double(pending) / Double(threads)) * Double.random(in: 0.85...1.15)
        return .milliseconds(Int64(min(wait, maxAnswer + 1)))
    }

    /// Whether logins from `source` are shared out per address: the edge's callers. The empty
    /// address is a trusted caller of auth's socket; an address is at most 45 characters (IPv6
    /// with IPv4 inside), so a longer one is not the edge's.
    private static func isShared(_ source: String) -> Bool { !source.isEmpty && source.utf8.count <= 64 }

    /// The whole server's refusal of a login now (its failed-login budget, then room), or nil;
    /// and how many may run or wait at once and still all finish within `maxWait`.
    private func serverCheck(_ state: inout State, _ now: Int64) -> (refusal: ServiceError?, capacity: Int) {
        state.budget.refill(now, capacity: Double(failureBudget))
        if state.budget.tokens < 1 {
            let spent = Self.budgetSpent(
                missing: 1 - state.budget.tokens, perMinute: Double(failureBudget), "on this server")
            return (spent, 0)
        }
        let fit =
            state.hashMillis > 0 ? max(threads, Int(min(maxWait / state.hashMillis, 1e6)) * threads) : maxPending
        let capacity = min(maxPending, fit)
        return (state.pending < capacity ? nil : Self.busy, capacity)
    }

    /// One address's refusal of a login now (its half of the budget, then of the room), or nil.
    private func sourceRefusal(_ entry: inout Source, capacity: Int, _ now: Int64) -> ServiceError? {
        entry.budget.refill(now, capacity: sourceBudget)
        if entry.budget.tokens < 1 {
            return Self.budgetSpent(missing: 1 - entry.budget.tokens, perMinute: sourceBudget, "from this address")
        }
        return entry.pending < max(1, capacity / 2) ? nil : Self.busy
    }

    /// Called on the hashing thread just before the hash: refuses (as a full gate does) a login
    /// that waited for its thread longer than `maxWait`, whose caller is likely about to give up.
    /// The slot is still the caller's to give back.
    public func starting(_ ticket: Ticket) throws {
        guard ContinuousClock.now - ticket.admitted <= .milliseconds(Int64(maxWait)) else { throw Self.late }
    }

    /// Gives the slot back; a failed login spends one unit of the global budget and of its
    /// source's. `hashDuration` (when a hash ran) feeds the wait estimate.
    public func leave(_ ticket: Ticket, failed: Bool, hashDuration: Duration? = nil) {
        let now = self.now()
        state.withLock { state in
            state.pending -= 1
            if let hashDuration { Self.record(hashDuration, in: &state) }
            if failed {
                state.budget.refill(now, capacity: Double(failureBudget))
                state.budget.tokens -= 1
            }
            guard !ticket.source.isEmpty, var entry = state.sources[ticket.source] else { return }
            entry.pending -= 1
            entry.budget.refill(now, capacity: sourceBudget)
            if failed { entry.budget.tokens -= 1 }
            state.sources[ticket.source] = entry.pending == 0 && entry.budget.tokens >= sourceBudget ? nil : entry
        }
    }

    /// Feeds one measured hash into the wait estimate (also the hash measured at start).
    public func record(hashDuration: Duration) {
        state.withLock { Self.record(hashDuration, in: &$0) }
    }

    /// Sources tracked now (for tests and the bound's proof).
    public var trackedSources: Int { state.withLock { $0.sources.count } }

    /// The key `source` is counted under: itself (tracked from now on if new), or "" when
    /// `maxSources` are tracked and none of them is idle.
    private func track(_ source: String, in state: inout State, _ now: Int64) -> String {
        if state.sources[source] != nil { return source }
        if state.sources.count >= maxSources, state.sweptAt.map({ now - $0 >= 1000 }) ?? true {
            state.sweptAt = now
            let budget = sourceBudget
            state.sources = state.sources.filter { _, entry in
                var bucket = entry.budget
                bucket.refill(now, capacity: budget)
                return entry.pending > 0 || bucket.tokens < budget
            }
        }
        guard state.sources.count < maxSources else { return "" }
        state.sources[source] = Source(budget: Bucket(tokens: sourceBudget, refilledAt: now))
        return source
    }

    /// When a login admitted by `ticket` is answered at the latest (`maxAnswer` after admission).
    /// Past it the caller gets ``stillChecking`` (429) while the hash, which cannot be
    /// stopped partway, goes on holding its slot; its verdict still counts.
    public func answerDeadline(_ ticket: Ticket) -> ContinuousClock.Instant {
        ticket.admitted + .milliseconds(Int64(maxAnswer))
    }

    /// Logins holding a slot now (running or waiting for their hash).
    public var pending: Int { state.withLock { $0.pending } }

    /// Runs `verdict` in a task of its own and answers with its value, or with ``stillChecking``
    /// once `deadline` passes first (`verdict` then goes on to its end).
    ///
    /// Why: on a machine slowed down after a login was admitted, its hash can take longer than the
    /// caller waits; the edge would then answer 503 after its RPC deadline, counted as an outage,
    /// for what is a busy gate. A hash cannot be stopped partway, so the two are raced through one
    /// continuation rather than a task group (which would wait for the hash).
    public static func answer<T: Sendable>(
        by deadline: ContinuousClock.Instant, _ verdict: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let waiter = Waiter<T>()
        return try await withCheckedThrowingContinuation { continuation in
            waiter.continuation.withLock { $0 = continuation }
            let timer = Task {
                // Cancelled: the verdict came first.
                guard (try? await Task.sleep(until: deadline)) != nil else { return }
                waiter.resume(with: .failure(stillChecking))
            }
            Task {
                let result: Result<T, any Error>
                do { result = .success(try await verdict()) } catch { result = .failure(error) }
                waiter.resume(with: result)
                timer.cancel()
            }
        }
    }

    /// The refusal of a full gate.
    static let busy = ServiceError.resourceExhausted(
        "too many logins in progress; retry after 1 s", retryAfterSeconds: 1)

    /// The refusal of a login admitted but left waiting for its thread past `maxWait`. Each of the
    /// three refusals says which bound it met, so an operator (or a test of the share per source)
    /// can tell a full gate from a machine slower than the gate's estimate.
    static let late = ServiceError.resourceExhausted(
        "login waited too long for its turn; retry after 1 s", retryAfterSeconds: 1)

    /// The answer to an admitted login whose hash outlasts `maxAnswer`: its verdict is on the way,
    /// and a right password's retry will need no hash. It says nothing about the name, whose hash
    /// (or a made-up name's wait) lasts the same.
    static let stillChecking = ServiceError.resourceExhausted(
        "login still being checked; retry after 1 s", retryAfterSeconds: 1)

    private static func budgetSpent(missing: Double, perMinute: Double, _ scope: String) -> ServiceError {
        let wait = Int64((missing * 60_000 / perMinute).rounded(.up))
        let seconds = Int(max(1, (wait + 999) / 1000))
        return .resourceExhausted(
            "too many failed logins \(scope); retry after \(seconds) s", retryAfterSeconds: seconds)
    }

    private static func record(_ duration: Duration, in state: inout State) {
        let millis = Double(duration.wholeNanoseconds) / 1e6
        state.hashMillis = state.hashMillis == 0 ? millis : state.hashMillis * 0.8 + millis * 0.2
    }

}

/// A continuation resumed once, by whichever of ``LoginGate/answer(by:_:)``'s two tasks comes first.
private final class Waiter<T: Sendable>: Sendable {
    let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)

    func resume(with result: Result<T, any Error>) { continuation.withLock { $0.take() }?.resume(with: result) }
}
