import Foundation
import GRDB
import HeraldModel
public import HeraldProto
import PostgresNIO

/// Erase, registration's part: which devices are a user's, on both stores.
///
/// A user's devices: tutorial registrations they own (or tagged `username:<user>`), installations
/// with their `userId` (or tagged `$UserId:<user>`), and those installations' templates (rows
/// whose parent is one of them). `hub` empty: every hub.
enum RegistrationErasure {
    static let maxPage = 1000

    /// The two tags that name a user: the tutorial's, added by the server, and NH's.
    static func tags(of user: String) -> [String] { ["username:\(user)", "$UserId:\(user)"] }

    static func checkPage(_ count: Int) throws {
        guard (1...maxPage).contains(count) else {
            throw ServiceError.invalidArgument("at most \(maxPage) devices a page, at least 1")
        }
    }
}

extension SQLiteRegistrations {
    /// `r`'s row is the user's (see ``RegistrationErasure``): arguments user, user, tag, tag, hub, hub.
    private static let isUsers = """
        ((r.owner = ? OR r.user_id = ? OR r.id IN (SELECT registration_id FROM registration_tag WHERE tag IN (?, ?)))
         AND (? = '' OR r.hub = ?))
        """

    private static func arguments(_ user: String, _ hub: String) -> StatementArguments {
        let tags = RegistrationErasure.tags(of: user)
        return [user, user, tags[0], tags[1], hub, hub]
    }

    func userDevices(user: String, hub: String, limit: Int) throws -> [UserDevice] {
        try db.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, platform, handle FROM registration
                    WHERE id IN (SELECT r.id FROM registration r WHERE \(Self.isUsers))
                       OR parent_id IN (SELECT r.id FROM registration r WHERE \(Self.isUsers))
                    ORDER BY id LIMIT ?
                    """,
                arguments: Self.arguments(user, hub) + Self.arguments(user, hub) + [limit]
            ).map {
                UserDevice(registrationID: $0["id"], platform: Platform(rawValue: $0["platform"]), handle: $0["handle"])
            }
        }
    }

    /// Deletes those of `ids` still the user's; their tags and templates go with them (cascade).
    func eraseUserDevices(user: String, hub: String, ids: [String]) throws -> Int64 {
        let list = String(decoding: try JSONEncoder().encode(ids), as: UTF8.self)
        return try db.write { db in
            try db.execute(
                sql: """
                    DELETE FROM registration
                    WHERE id IN (SELECT value FROM json_each(?))
                      AND (id IN (SELECT r.id FROM registration r WHERE \(Self.isUsers))
                           OR parent_id IN (SELECT r.id FROM registration r WHERE \(Self.isUsers)))
                    """,
                arguments: [list] + Self.arguments(user, hub) + Self.arguments(user, hub))
            return Int64(db.changesCount)
        }
    }
}

extension SQLiteRegistrationStore {
    nonisolated(nonsending) public func userDevices(user: String, hub: String, limit: Int) async throws
        -> [UserDevice]
    {
        try RegistrationErasure.checkPage(limit)
        return try tables.userDevices(user: user, hub: hub, limit: limit)
    }
    nonisolated(nonsending) public func eraseUserDevices(user: String, hub: String, ids: [String]) async throws
        -> Int64
    {
        guard !ids.isEmpty else { return 0 }
        try RegistrationErasure.checkPage(ids.count)
        return try tables.eraseUserDevices(user: user, hub: hub, ids: ids)
    }
}

/// The `users` CTE is written in both queries: postgres-nio binds interpolated values in order, so
/// a shared fragment would have to renumber its parameters by hand.
extension PostgresRegistrationStore {
    nonisolated(nonsending) public func userDevices(user: String, hub: String, limit: Int) async throws
        -> [UserDevice]
    {
        try RegistrationErasure.checkPage(limit)
        let tags = RegistrationErasure.tags(of: user)
        let rows = try await db.rows(
            """
            WITH users AS (
                SELECT r.id FROM registration r
                WHERE (r.owner = \(user) OR r.user_id = \(user)
                       OR r.id IN (SELECT registration_id FROM registration_tag WHERE tag = ANY(\(tags))))
                  AND (\(hub) = '' OR r.hub = \(hub)))
            SELECT id, platform, handle FROM registration
            WHERE id IN (SELECT id FROM users) OR parent_id IN (SELECT id FROM users)
            ORDER BY id LIMIT \(Int64(limit))
            """)
        return try rows.map { row in
            let (id, platform, handle) = try row.decode((String, Int32, String).self)
            return UserDevice(registrationID: id, platform: Platform(rawValue: platform), handle: handle)
        }
    }

    nonisolated(nonsending) public func eraseUserDevices(user: String, hub: String, ids: [String]) async throws
        -> Int64
    {
        guard !ids.isEmpty else { return 0 }
        try RegistrationErasure.checkPage(ids.count)
        let tags = RegistrationErasure.tags(of: user)
        let rows = try await db.rows(
            """
            WITH users AS (
                SELECT r.id FROM registration r
                WHERE (r.owner = \(user) OR r.user_id = \(user)
                       OR r.id IN (SELECT registration_id FROM registration_tag WHERE tag = ANY(\(tags))))
                  AND (\(hub) = '' OR r.hub = \(hub)))
            DELETE FROM registration
            WHERE id = ANY(\(ids)) AND (id IN (SELECT id FROM users) OR parent_id IN (SELECT id FROM users))
            RETURNING id
            """)
        return Int64(rows.count)
    }
}
