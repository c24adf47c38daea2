import HeraldModel
public import HeraldProto
import HeraldSQL

/// The lane a send's deliveries wait in, within their hub (`delivery.lane`).
public enum DeliveryLane: Int32, Sendable {
    /// A send to one person: a user (`to_user`, the tutorials' secure and rich pushes), one
    /// device (a direct send to one handle) or one installation or user tag (`username:…`,
    /// `$UserId:{…}`, `$InstallationId:{…}`). Claimed ahead of the hub's other rows.
    case personal = 0
    /// Everything else: tags, broadcasts, direct sends to many handles.
    case bulk = 1

    /// A one-person send to more devices than this is not one person's (a shared test account,
    /// a tag misused as a segment): it waits in the bulk lane.
    public static let personalDevices = 100

    /// The lane of `request`'s send to `devices` devices.
    public static func of(_ request: SendRequest, devices: Int) -> DeliveryLane {
        guard devices <= personalDevices, !request.broadcast else { return .bulk }
        if !request.targetUser.isEmpty { return .personal }
        if !request.deviceHandles.isEmpty { return request.deviceHandles.count == 1 ? .personal : .bulk }
        return isPersonalTag(request.targetTag) ? .personal : .bulk
    }

    /// One tag, no expression, naming one person or installation.
    static func isPersonalTag(_ tag: String) -> Bool {
        guard !tag.contains(where: { "&|!() ".contains($0) }) else { return false }
        return ["username:", "$UserId:", "$InstallationId:"].contains { tag.hasPrefix($0) && tag.count > $0.count }
    }
}

/// How a claim shares its rows among hubs.
///
/// A claim serves at most ``maxHubs`` hubs with due rows, in name order starting after the hub the
/// previous claim ended with (so with more hubs than that, each is served within a few claims),
/// and gives each a share of its `limit` in proportion to its weight (equal shares by default;
/// ``HubPushLimit/weight``): what a hub does not use goes to the hubs that had more, again by
/// weight. Within a hub, its personal lane first, then its bulk lane; within a
/// lane, the oldest due first across the claim's platforms. So a hub's broadcast of a million
/// devices takes at most its share of each claim while another hub has anything due, and its own
/// one-person sends go before it: nothing waits for a backlog that is not its own, and nothing
/// starves (each hub with due rows gets at least one row of every claim it is part of).
enum FairClaims {
    /// Most hubs one claim serves: each costs two short index reads per platform.
    static let maxHubs = 16

    /// The hubs a claim serves, from each platform's hubs with pending rows (sorted by name):
    /// those after `cursor` first, then from the start, at most ``maxHubs``.
    static func order(_ hubs: Set<String>, after cursor: String) -> [String] {
        let sorted = hubs.sorted()
        let after = sorted.filter { $0 > cursor }
        return Array((after + sorted.filter { $0 <= cursor }).prefix(maxHubs))
    }

    /// Each of `hubs`' share of a claim of `limit` rows: in proportion to its weight (1 when
    /// `weights` does not name it; at most ``HubPushLimit/maxWeight``), what rounding leaves one
    /// row each in order, at least one row each. They add up to `limit` when it is at least the
    /// number of hubs.
    static func shares(of hubs: [String], limit: Int, weights: [String: Int]) -> [Int] {
        guard !hubs.isEmpty else { return [] }
        let weightOf = { (hub: String) in min(max(weights[hub] ?? 1, 1), Int(HubPushLimit.maxWeight)) }
        // Claims are batches of thousands of rows: a limit past 2^40 is one that cannot be filled.
        let limit = min(max(limit, 0), 1 << 40)
        let total = hubs.reduce(0) { $0 + weightOf($1) }
        var shares = hubs.map { limit * weightOf($0) / total }
        var left = limit - shares.reduce(0, +)
        for index in shares.indices where left > 0 {
            shares[index] += 1
            left -= 1
        }
        return shares.map { max(1, $0) }
    }

    /// Where the next claim starts: after the last hub served when some were left out, else after
    /// the first (so the first place, which gets what others leave, goes round); from the start
    /// when one hub was all there was.
    static func cursor(serving hubs: [String], of active: Int) -> String {
        guard active > 1 else { return "" }
        return (active > hubs.count ? hubs.last : hubs.first) ?? ""
    }
}

extension Outbox {
    /// Up to `limit` hubs with pending deliveries of `platform` whose names sort after `after`, in
    /// name order: a loose scan of `delivery_due`, one index look-up per hub, however many rows
    /// each has (a recursive query; both databases run it as it is written).
    static func hubsWithPending(_ platform: Platform, after: String, limit: Int) -> SQLQuery {
        """
        WITH RECURSIVE active(hub, n) AS (
            SELECT (SELECT MIN(hub) FROM delivery
                    WHERE state = \(pendingState) AND platform = \(platform.rawValue) AND hub > \(after)), 1
            UNION ALL
            SELECT (SELECT MIN(hub) FROM delivery
                    WHERE state = \(pendingState) AND platform = \(platform.rawValue) AND hub > active.hub), n + 1
            FROM active WHERE active.hub IS NOT NULL AND n < \(raw: String(max(1, limit)))
        )
        SELECT hub FROM active WHERE hub IS NOT NULL
        """
    }

    /// One lane of one hub's due deliveries of `platform`, oldest first: one ordered range of
    /// `delivery_due` (platform, hub, lane, next_attempt_at, sequence). On PostgreSQL, rows another
    /// replica is claiming are skipped.
    /// With `after`, only the rows past that one in the range's order (a claim's second look at a
    /// hub goes on where its first stopped instead of reading those rows again).
    static func due(
        _ platform: Platform, hub: String, lane: DeliveryLane, at: Int64, limit: Int,
        after: (due: Int64, sequence: Int64)? = nil
    ) -> SQLQuery {
        let past: SQLQuery = after.map { "AND (next_attempt_at, sequence) > (\($0.due), \($0.sequence))" } ?? ""
        return """
            SELECT sequence, notification_id, registration_id, platform, handle, message_id, attempts, give_up_at,
                   variant, leased_by, next_attempt_at, lease_id
            FROM delivery
            WHERE state = \(pendingState) AND platform = \(platform.rawValue) AND hub = \(hub)
              AND lane = \(lane.rawValue) AND next_attempt_at <= \(at) \(past)
            ORDER BY next_attempt_at, sequence LIMIT \(limit) \(SQLFragment.skipLocked)
            """
    }

    /// ``hubsWithPending(_:after:_:)``, or what it answered an earlier claim of the same
    /// platforms, with the hubs sends gave rows since (``HubDiscovery``); `reused` says which.
    func discoverHubs(_ platforms: [Platform], after cursor: String, _ session: any SQLSession) async throws
        -> (hubs: [Platform: Set<String>], reused: Bool)
    {
        let at = ContinuousClock.now
        if let kept = discovered.withLock({ $0[platforms] }), at - kept.at < hubLookInterval.withLock({ $0 }) {
            return (kept.hubs, true)
        }
        let (found, complete) = try await hubsWithPending(platforms, after: cursor, session)
        // A look adds what it found to what is kept, which holds the hubs that sends named while
        // it read (their rows may have come after its reads); only forgetDone takes hubs out. Past
        // FairClaims.maxHubs hubs a look names only those after the cursor: nothing is kept.
        let hubs = discovered.withLock { kept -> [Platform: Set<String>] in
            guard complete else {
                kept[platforms] = nil
                return found
            }
            let hubs = (kept[platforms]?.hubs ?? [:]).merging(found) { $0.union($1) }
            kept[platforms] = HubDiscovery(at: at, hubs: hubs)
            return hubs
        }
        return (hubs, false)
    }

    /// A send committed rows of `hub` on `platforms` (here, or on a replica that said so).
    func noteSend(hub: String, platforms: [Platform]) {
        discovered.withLock { kept in
            for key in kept.keys {
                for platform in platforms where key.contains(platform) {
                    kept[key]?.hubs[platform, default: []].insert(hub)
                }
            }
        }
    }

    /// Of `hubs`, which had nothing due, those with no pending rows left on a platform leave the
    /// hubs the claims know of there, as a look would find (one short read each: the hub's own
    /// range). Those with rows leased or waiting for a retry stay.
    func forgetDone(
        _ hubs: [String], of platforms: [Platform], _ known: [Platform: Set<String>], _ session: any SQLSession
    ) async throws {
        var done: [(Platform, String)] = []
        for hub in hubs {
            for platform in platforms where known[platform]?.contains(hub) == true {
                let pending = try await session.queryFirst(
                    """
                    SELECT 1 FROM delivery
                    WHERE state = \(Outbox.pendingState) AND platform = \(platform.rawValue) AND hub = \(hub) LIMIT 1
                    """)
                if pending == nil { done.append((platform, hub)) }
            }
        }
        guard !done.isEmpty else { return }
        discovered.withLock { kept in
            for (platform, hub) in done {
                kept[platforms]?.hubs[platform]?.remove(hub)
                if kept[platforms]?.hubs[platform]?.isEmpty == true { kept[platforms]?.hubs[platform] = nil }
            }
        }
    }

    /// Each of `platforms`' hubs with pending deliveries, as ``FairClaims/order(_:after:)`` needs
    /// them: those after `cursor` and, when there are not more than ``FairClaims/maxHubs`` of
    /// those, those from the start; at most one more than a claim serves of each.
    func hubsWithPending(_ platforms: [Platform], after cursor: String, _ session: any SQLSession) async throws
        -> (hubs: [Platform: Set<String>], complete: Bool)
    {
        var hubs: [Platform: Set<String>] = [:]
        // Whether every hub with pending rows was found: fewer than `enough` on every look.
        var complete = true
        for platform in platforms {
            // One more than a claim serves: then the claim knows some were left out.
            let enough = FairClaims.maxHubs + 1
            // From the start first: with fewer hubs than `enough` that is all of them, in one
            // read (each read walks what a broadcast's claimed rows left in the index).
            var found = try await session.query(Self.hubsWithPending(platform, after: "", limit: enough)).map {
                try $0[0] as String
            }
            if found.count >= enough {
                complete = false
                if !cursor.isEmpty {
                    let onward = try await session.query(Self.hubsWithPending(platform, after: cursor, limit: enough))
                        .map { try $0[0] as String }
                    found = onward + (onward.count < enough ? found.filter { $0 <= cursor } : [])
                }
            }
            if !found.isEmpty { hubs[platform] = Set(found) }
        }
        return (hubs, complete)
    }

    /// When the earliest pending delivery is due (Unix ms; a leased one when its lease ends), if
    /// any: the least of ``earliestDue(of:)``. Past 64 hubs on a platform, the rest are not looked
    /// at: the worker waits at most a second whatever this says.
    public func nextDue() async throws -> Int64? {
        try await earliestDue(of: openSends()).values.min()
    }

    /// The deliveries left of the open sends, per hub and platform (their counters): a read of the
    /// few open sends, ordered by hub, then platform.
    func openSends() async throws -> [(hub: String, platform: Int32, pending: Int64)] {
        try await sql.query(
            """
            SELECT n.hub, p.platform, CAST(SUM(p.pending) AS BIGINT)
            FROM notification n JOIN notification_platform p ON p.notification_id = n.id
            WHERE n.state IN (1, 2) GROUP BY n.hub, p.platform ORDER BY n.hub, p.platform
            """
        ).map { (try $0[0], try $0[1], try $0[2]) }
    }

    /// Each hub's earliest pending delivery (Unix ms; a leased one when its lease ends): the
    /// least first entry of each lane of each platform in `delivery_due`, one look-up each, never a
    /// scan; at most ``metricHubs`` hubs of each platform.
    ///
    /// The hubs are those whose open sends have deliveries of the platform left (`open`, from
    /// ``openSends()``), not a look along `delivery_due` as a claim's
    /// (``hubsWithPending(_:after:_:)``): on PostgreSQL that look walks the old entries a
    /// broadcast's claimed rows leave until vacuum, and this runs every second on every replica.
    func earliestDue(of open: [(hub: String, platform: Int32, pending: Int64)]) async throws -> [String: Int64] {
        var hubs: [Int32: [String]] = [:]
        for send in open where send.pending > 0 && hubs[send.platform, default: []].count < Self.metricHubs {
            hubs[send.platform, default: []].append(send.hub)
        }
        var first: [String: Int64] = [:]
        for platform in Platform.delivered {
            for hub in hubs[platform.rawValue] ?? [] {
                if let due = try await earliestDue(platform, hub: hub) { first[hub] = min(first[hub] ?? due, due) }
            }
        }
        return first
    }

    /// `hub`'s earliest pending delivery of `platform`: the first entry of each lane's range.
    private func earliestDue(_ platform: Platform, hub: String) async throws -> Int64? {
        var first: Int64?
        for lane in [DeliveryLane.personal, .bulk] {
            let row = try await sql.queryFirst(
                """
                SELECT MIN(next_attempt_at) FROM delivery
                WHERE state = \(Outbox.pendingState) AND platform = \(platform.rawValue) AND hub = \(hub)
                  AND lane = \(lane.rawValue)
                """)
            if let row, let due = try row[0] as Int64? { first = min(first ?? due, due) }
        }
        return first
    }
}

/// The hubs with pending deliveries a claim found, kept for the next claims of the same platforms.
///
/// Finding them is a loose scan of `delivery_due` from the start of each platform's range. On
/// PostgreSQL that start is where a broadcast's claimed rows leave their old index entries until
/// vacuum removes them, so every claim walked them again: during a 1,000,000-device broadcast that
/// scan was most of what the server did (sampled from `pg_stat_activity`: 305 of 400 active
/// statements) and the broadcast ran 20% slower than before fair claims. Only a send adds a hub
/// (``Outbox/enqueue(_:targets:staged:scheduled:)``
/// is the one writer of pending rows), so the claims look again only every ``maxAge``, and in
/// between each send's hub joins what they know: a send made here at its commit, another
/// replica's when its NOTIFY arrives (which names the hub and platforms, ``notice(hub:platforms:)``).
/// A hub leaves when a claim finds it with nothing due and no pending rows at all
/// (``Outbox/forgetDone(_:of:_:_:)``), so leased rows and retries keep their hub. What the claims
/// miss for up to ``maxAge`` is only another replica's send whose notice was lost with its connection.
struct HubDiscovery {
    /// How long the claims go without looking for hubs.
    static let maxAge: Duration = .seconds(1)

    var at: ContinuousClock.Instant
    var hubs: [Platform: Set<String>]

    /// The NOTIFY payload of a send committed with rows of `hub` on `platforms`: `hub:1,2`.
    static func notice(hub: String, platforms: [Platform]) -> String {
        hub + ":" + platforms.map { String($0.rawValue) }.sorted().joined(separator: ",")
    }

    /// A ``notice(hub:platforms:)`` payload; nil for anything else (an older replica's empty one).
    static func parse(notice: String) -> (hub: String, platforms: [Platform])? {
        guard notice.utf8.count <= 300, let colon = notice.lastIndex(of: ":") else { return nil }
        let hub = String(notice[..<colon])
        guard (try? Outbox.checkHub(hub)) != nil else { return nil }
        var platforms: [Platform] = []
        for number in notice[notice.index(after: colon)...].split(separator: ",") {
            guard let value = Int32(number) else { return nil }
            platforms.append(Platform(rawValue: value))
        }
        return platforms.isEmpty ? nil : (hub, platforms)
    }
}

extension Outbox {
    /// A due delivery as ``due(_:hub:lane:at:limit:)`` reads it.
    typealias Claimed = (
        sequence: Int64, notificationID: String, registrationID: String, platform: Platform, handle: String,
        messageID: String, attempts: Int, giveUpAt: Int64, variant: Int, leasedBy: String, due: Int64,
        leaseID: Int64
    )

    static func claimed(_ row: SQLRow) throws -> Claimed {
        (
            try row[0], try row[1], try row[2], Platform(rawValue: try row[3]), try row[4], try row[5],
            try row[6], try row[7], try row[8], try row[9], try row[10], try row[11]
        )
    }
}

/// One hub's queue, as the metrics sample it each second.
public struct HubQueue: Sendable, Equatable {
    /// The hub's id (herald-auth's `Hub.id`).
    public var hub: String
    /// Deliveries of its open sends not finished yet (its sends' counters).
    public var pending: Int64
    /// How long its oldest due delivery has been due, in milliseconds: 0 when none is.
    public var oldestDue: Int64
}

extension Outbox {
    /// Most hubs the per-hub gauges name: label values are hub ids, which operators make, and a
    /// deployment with more has the first by id.
    public static let metricHubs = 64

    /// Each hub's queue: its open sends' pending counters (``openSends()``, which also name the
    /// hubs to look at), and its ``earliestDue(of:)``: never a count of a backlog's rows. Sorted by hub.
    public func hubQueues() async throws -> [HubQueue] {
        let at = now()
        let open = try await openSends()
        var queues: [String: HubQueue] = [:]
        for send in open where queues[send.hub] != nil || queues.count < Self.metricHubs {
            var queue = queues[send.hub] ?? HubQueue(hub: send.hub, pending: 0, oldestDue: 0)
            let (sum, overflow) = queue.pending.addingReportingOverflow(send.pending)
            queue.pending = overflow ? .max : sum
            queues[send.hub] = queue
        }
        for (hub, due) in try await earliestDue(of: open) where due <= at {
            var queue = queues[hub] ?? HubQueue(hub: hub, pending: 0, oldestDue: 0)
            queue.oldestDue = at - due
            queues[hub] = queue
        }
        return Array(queues.values.sorted { $0.hub < $1.hub }.prefix(Self.metricHubs))
    }

    /// One hub's queue (GetHubQueue), read as ``hubQueues()`` reads each: whatever the number of hubs.
    public func hubQueue(hub: String) async throws -> HubQueue {
        let at = now()
        let pending: Int64 =
            try await sql.queryFirst(
                """
                SELECT CAST(COALESCE(SUM(p.pending), 0) AS BIGINT)
                FROM notification n JOIN notification_platform p ON p.notification_id = n.id
                WHERE n.state IN (1, 2) AND n.hub = \(hub)
                """
            ).map { try $0[0] } ?? 0
        var first: Int64?
        for platform in Platform.delivered {
            if let due = try await earliestDue(platform, hub: hub) { first = min(first ?? due, due) }
        }
        return HubQueue(hub: hub, pending: pending, oldestDue: first.map { $0 <= at ? at - $0 : 0 } ?? 0)
    }
}
