import Foundation
import HeraldModel
import HeraldProto
import HeraldSQL

/// A hub's push limits (`hub_push_limit`), as herald-dispatch enforces them: quotas in the send's
/// commit (``Outbox/countPushes(_:hub:at:_:)``), concurrency in the delivery worker's claims.
public struct HubPushLimit: Sendable, Equatable {
    public var perDay: Int64 = 0
    public var perMonth: Int64 = 0
    public var maxConcurrent: Int64 = 0
    /// The hub's share of each claim relative to the other hubs with due deliveries
    /// (``FairClaims``): 1 to ``maxWeight``; 0 is the default, 1.
    public var weight: Int64 = 0

    /// The largest weight: one hub may take at most this many times another's share.
    public static let maxWeight: Int64 = HubLimitBounds.maxWeight

    public init(perDay: Int64 = 0, perMonth: Int64 = 0, maxConcurrent: Int64 = 0, weight: Int64 = 0) {
        self.perDay = perDay
        self.perMonth = perMonth
        self.maxConcurrent = maxConcurrent
        self.weight = weight
    }

    /// A quota is set: sends of the hub are counted.
    var counts: Bool { perDay > 0 || perMonth > 0 }

    /// The usage counters' keys for Unix ms `at`: its UTC day and month ("d2026-11-28", "m2026-11").
    static func periods(at: Int64) -> (day: String, month: String) {
        // Days since the epoch to a civil date (Howard Hinnant's algorithm): no calendar object,
        // no locale, no trap for any Int64 of the clock.
        let days = at >= 0 ? at / 86_400_000 : -(-(at + 1) / 86_400_000) - 1
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return ("d\(year)-\(two(month))-\(two(day))", "m\(year)-\(two(month))")
    }
}

extension Outbox {
    /// Sets `hub`'s push limits (all of them; zeros delete the row, so an unlimited hub has none).
    public func setPushLimits(_ limits: HubPushLimit, hub: String) async throws {
        guard limits.perDay >= 0, limits.perMonth >= 0, limits.maxConcurrent >= 0 else {
            throw ServiceError.invalidArgument("push limits must not be negative (0: no limit)")
        }
        guard (0...HubPushLimit.maxWeight).contains(limits.weight) else {
            throw ServiceError.invalidArgument("weight must be 1 to \(HubPushLimit.maxWeight) (0: the default, 1)")
        }
        try Self.checkHub(hub)
        var limits = limits
        if limits.weight == 1 { limits.weight = 0 }
        if limits == HubPushLimit() {
            try await sql.execute("DELETE FROM hub_push_limit WHERE hub = \(hub)")
            claimWeights.withLock { $0[hub] = nil }
            return
        }
        try await sql.execute(
            """
            INSERT INTO hub_push_limit (hub, pushes_per_day, pushes_per_month, max_concurrent, weight)
            VALUES (\(hub), \(limits.perDay), \(limits.perMonth), \(limits.maxConcurrent), \(limits.weight))
            ON CONFLICT (hub) DO UPDATE SET pushes_per_day = excluded.pushes_per_day,
                pushes_per_month = excluded.pushes_per_month, max_concurrent = excluded.max_concurrent,
                weight = excluded.weight
            """)
        // This replica's claims use the weight at once; the others read it back within seconds.
        claimWeights.withLock { $0[hub] = limits.weight > 1 ? Int(limits.weight) : nil }
    }

    /// INVALID_ARGUMENT unless `hub` is a hub id as herald-auth makes them: 1 to 256 bytes.
    public static func checkHub(_ hub: String) throws {
        guard !hub.isEmpty, hub.utf8.count <= 256 else {
            throw ServiceError.invalidArgument("hub must be 1 to 256 bytes")
        }
    }

    /// `hub`'s push limits (none: all 0) and its pushes counted today and this month.
    public func pushLimits(hub: String) async throws -> (limits: HubPushLimit, today: Int64, thisMonth: Int64) {
        let limits = try await Self.pushLimits(hub: hub, sql) ?? HubPushLimit()
        let (day, month) = HubPushLimit.periods(at: now())
        var used: [String: Int64] = [:]
        for row in try await sql.query(
            "SELECT period, pushes FROM hub_usage WHERE hub = \(hub) AND period \(anyOf: [day, month])")
        {
            used[try row[0]] = try row[1]
        }
        return (limits, used[day] ?? 0, used[month] ?? 0)
    }

    /// Every hub's concurrency limit that is set; the weights that are set are kept for the
    /// claims. The delivery worker reads them every few seconds (set through any replica).
    public func reloadClaimLimits() async throws -> [String: Int] {
        var limits: [String: Int] = [:]
        var weights: [String: Int] = [:]
        for row in try await sql.query(
            "SELECT hub, max_concurrent, weight FROM hub_push_limit WHERE max_concurrent > 0 OR weight > 1")
        {
            let hub: String = try row[0]
            let cap: Int64 = try row[1]
            let weight: Int64 = try row[2]
            if cap > 0 { limits[hub] = Int(clamping: cap) }
            // FairClaims.shares bounds each weight where it is used.
            if weight > 1 { weights[hub] = Int(clamping: weight) }
        }
        claimWeights.withLock { $0 = weights }
        return limits
    }

    /// A deleted hub's limits and counters.
    public func deletePushLimits(hub: String) async throws {
        claimWeights.withLock { $0[hub] = nil }
        try await sql.execute("DELETE FROM hub_push_limit WHERE hub = \(hub)")
        try await sql.execute("DELETE FROM hub_usage WHERE hub = \(hub)")
    }

    /// Usage counters of days and months before `before` (Unix ms): a month's and a day's rows
    /// are kept while they can still be read, then go with the outbox's retention.
    func purgeUsage(before: Int64) async throws {
        let (day, month) = HubPushLimit.periods(at: before)
        try await sql.execute(
            "DELETE FROM hub_usage WHERE (period < \(day) AND period LIKE 'd%') OR (period < \(month) AND period LIKE 'm%')"
        )
    }

    static func pushLimits(hub: String, _ session: any SQLSession) async throws -> HubPushLimit? {
        try await session.queryFirst(
            "SELECT pushes_per_day, pushes_per_month, max_concurrent, weight FROM hub_push_limit WHERE hub = \(hub)"
        ).map { HubPushLimit(perDay: try $0[0], perMonth: try $0[1], maxConcurrent: try $0[2], weight: try $0[3]) }
    }

    /// Counts `pushes` deliveries of `hub` in its day's and month's counters, in the send's own
    /// transaction; throws ``ServiceError/quotaExceeded(_:)`` (and the transaction with it) when
    /// that takes the hub past a quota. A hub without a quota is not counted: one read.
    ///
    /// On PostgreSQL the counter rows are updated in place, so concurrent sends of one hub (on any
    /// replica) wait for each other's commit on them: exact, at the price of one hub's sends
    /// committing one at a time while it has a quota.
    static func countPushes(_ pushes: Int, hub: String, at: Int64, _ session: any SQLSession) async throws {
        guard pushes > 0, let limits = try await pushLimits(hub: hub, session), limits.counts else { return }
        let (day, month) = HubPushLimit.periods(at: at)
        for (period, quota, name) in [(day, limits.perDay, "day"), (month, limits.perMonth, "month")] where quota > 0 {
            let total: Int64 =
                try await session.executeReturning(
                    """
                    INSERT INTO hub_usage (hub, period, pushes) VALUES (\(hub), \(period), \(Int64(pushes)))
                    ON CONFLICT (hub, period) DO UPDATE SET pushes = hub_usage.pushes + excluded.pushes
                    RETURNING pushes
                    """
                ).first?[0] ?? 0
            guard total <= quota else {
                throw ServiceError.quotaExceeded(
                    "QuotaExceeded: the hub's quota of \(quota) pushes a \(name) leaves \(max(0, quota - (total - Int64(pushes)))), and this send is \(pushes); nothing was sent"
                )
            }
        }
    }
}

extension DispatchSchema {
    /// Push limits and their counters: one row per limited hub, one per hub and period
    /// ("d2026-11-28", "m2026-11") while it has a quota.
    static let pushLimits = SQLMigration(
        postgres: "dispatch-v11-push-limits", sqlite: "outbox-v17-push-limits",
        [
            """
            CREATE TABLE hub_push_limit (
                hub TEXT PRIMARY KEY, pushes_per_day BIGINT NOT NULL, pushes_per_month BIGINT NOT NULL,
                max_concurrent BIGINT NOT NULL)
            """,
            """
            CREATE TABLE hub_usage (
                hub TEXT NOT NULL, period TEXT NOT NULL, pushes BIGINT NOT NULL, PRIMARY KEY (hub, period))
            """,
        ])

    /// A hub's weight in the claims: 0 is the default, 1.
    static let hubWeight = SQLMigration(
        postgres: "dispatch-v12-hub-weight", sqlite: "outbox-v18-hub-weight",
        ["ALTER TABLE hub_push_limit ADD COLUMN weight BIGINT NOT NULL DEFAULT 0"])
}
