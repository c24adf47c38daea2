import GRDB
import HeraldModel
public import HeraldProto
import HeraldService
import PostgresNIO

/// The web console's reads (issue 18) on SQLite: recent sends, minutes, platform results. Each is
/// a range of the (hub, created_at, id) index, never a scan of `delivery`.
extension Outbox {
    public func recentSends(hub: String, before: (createdAt: Int64, id: String), limit: Int) throws -> [String] {
        try db.read { db in
            try String.fetchAll(
                db, sql: OutboxConsoleSQL.recentSends,
                arguments: [hub, before.createdAt, before.createdAt, before.id, limit])
        }
    }

    public func sendStats(hub: String, since: Int64) throws -> [SendStatsMinute] {
        try db.read { db in
            let counts = try Row.fetchAll(db, sql: OutboxConsoleSQL.minuteCounts, arguments: [hub, since]).map {
                (minute: $0[0] as Int64, sends: $0[1] as Int64, delivered: $0[2] as Int64)
            }
            let failures = try Row.fetchAll(db, sql: OutboxConsoleSQL.minuteFailures, arguments: [hub, since]).map {
                (minute: $0[0] as Int64, reason: $0[1] as String, count: $0[2] as Int64)
            }
            return OutboxConsoleSQL.minutes(counts: counts, failures: failures)
        }
    }

    public func recentPlatformResults(hub: String, since: Int64, limit: Int) throws -> OutboxPlatformResults {
        try db.read { db in
            var results = OutboxPlatformResults()
            results.counts = try Row.fetchAll(db, sql: OutboxConsoleSQL.platformCounts, arguments: [hub, since, limit])
                .map {
                    (Platform(rawValue: $0[0]), $0[1], $0[2], $0[3], $0[4])
                }
            results.failures = try Row.fetchAll(
                db, sql: OutboxConsoleSQL.platformFailures, arguments: [hub, since, limit]
            ).map {
                (Platform(rawValue: $0[0]), $0[1], $0[2])
            }
            return results
        }
    }
}

/// The same reads on PostgreSQL.
extension PostgresOutbox {
    nonisolated(nonsending) public func recentSends(hub: String, before: (createdAt: Int64, id: String), limit: Int)
        async throws
        -> [String]
    {
        try await rows(
            OutboxConsoleSQL.recentSends, [hub, before.createdAt, before.createdAt, before.id, Int64(limit)]
        ).map {
            try $0.decode(String.self)
        }
    }

    nonisolated(nonsending) public func sendStats(hub: String, since: Int64) async throws -> [SendStatsMinute] {
        let counts = try await rows(OutboxConsoleSQL.minuteCounts, [hub, since]).map {
            let (minute, sends, delivered) = try $0.decode((Int64, Int64, Int64).self)
            return (minute: minute, sends: sends, delivered: delivered)
        }
        let failures = try await rows(OutboxConsoleSQL.minuteFailures, [hub, since]).map {
            let (minute, reason, count) = try $0.decode((Int64, String, Int64).self)
            return (minute: minute, reason: reason, count: count)
        }
        return OutboxConsoleSQL.minutes(counts: counts, failures: failures)
    }

    nonisolated(nonsending) public func recentPlatformResults(hub: String, since: Int64, limit: Int) async throws
        -> OutboxPlatformResults
    {
        var results = OutboxPlatformResults()
        results.counts = try await rows(OutboxConsoleSQL.platformCounts, [hub, since, Int64(limit)]).map {
            let (platform, createdAt, success, failure, pending) = try $0.decode(
                (Int32, Int64, Int64, Int64, Int64).self)
            return (Platform(rawValue: platform), createdAt, success, failure, pending)
        }
        results.failures = try await rows(OutboxConsoleSQL.platformFailures, [hub, since, Int64(limit)]).map {
            let (platform, createdAt, reason) = try $0.decode((Int32, Int64, String).self)
            return (Platform(rawValue: platform), createdAt, reason)
        }
        return results
    }

    /// One of ``OutboxConsoleSQL``'s statements with its values bound in order.
    private func rows(_ sql: String, _ values: [any PostgresNonThrowingEncodable & Sendable]) async throws
        -> [PostgresRow]
    {
        var bindings = PostgresBindings(capacity: values.count)
        for value in values { bindings.append(value) }
        return try await db.rows(PostgresQuery(unsafeSQL: OutboxConsoleSQL.postgres(sql), binds: bindings))
    }
}
