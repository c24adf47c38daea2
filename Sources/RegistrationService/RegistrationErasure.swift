import Foundation
import GRDB
import HeraldModel
public import HeraldProto
import NIOCore
import PostgresNIO

/// Erase, registration's part: which devices are a user's, on both stores.
///
/// A user's devices: tutorial registrations they own (or tagged `username:<user>`), installations
/// with their `userId` (or tagged `$UserId:<user>`), and those installations' templates (rows
/// whose parent is one of them). `hub` empty: every hub.
///
/// Found through indexes only: the owner index, and the tag index for the two tags. An installation
/// with a userId always carries its `$UserId:{…}` tag (``Installation/audienceTags``), so the
/// unindexed `user_id` column is never tested: that test made every page scan the whole table.
enum RegistrationErasure {
    static let maxPage = 1000

    /// The two tags that name a user: the tutorial's, added by the server, and NH's.
    static func tags(of user: String) -> [String] { Names.userSystemTags(of: user) }

    static func checkPage(_ count: Int) throws {
        guard (1...maxPage).contains(count) else {
            throw ServiceError.invalidArgument("at most \(maxPage) devices a page, at least 1")
        }
    }
}

extension SQLiteRegistrations {
    /// `r`'s row is the user's (see ``RegistrationErasure``): arguments user, tag, tag, hub, hub.
    static let isUsers = """
        ((r.owner = ? OR r.id IN (SELECT registration_id FROM registration_tag WHERE tag IN (?, ?)))
         AND (? = '' OR r.hub = ?))
        """

    static func arguments(_ user: String, _ hub: String) -> StatementArguments {
        let tags = RegistrationErasure.tags(of: user)
        return [user, tags[0], tags[1], hub, hub]
    }

    func userDevices(user: String, hub: String, after: String, limit: Int) throws -> [UserDevice] {
        try db.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, platform, handle FROM registration
                    WHERE (id IN (SELECT r.id FROM registration r WHERE \(Self.isUsers))
                           OR parent_id IN (SELECT r.id FROM registration r WHERE \(Self.isUsers)))
                      AND id > ?
                    ORDER BY id LIMIT ?
                    """,
                arguments: Self.arguments(user, hub) + Self.arguments(user, hub) + [after, limit]
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
    nonisolated(nonsending) public func userDevices(user: String, hub: String, after: String, limit: Int)
        async throws -> [UserDevice]
    {
        try RegistrationErasure.checkPage(limit)
        return try tables.userDevices(user: user, hub: hub, after: after, limit: limit)
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
    nonisolated(nonsending) public func userDevices(user: String, hub: String, after: String, limit: Int)
        async throws -> [UserDevice]
    {
        try RegistrationErasure.checkPage(limit)
        let tags = RegistrationErasure.tags(of: user)
        let rows = try await db.rows(
            """
            WITH users AS (
                SELECT r.id FROM registration r
                WHERE (r.owner = \(user)
                       OR r.id IN (SELECT registration_id FROM registration_tag WHERE tag = ANY(\(tags))))
                  AND (\(hub) = '' OR r.hub = \(hub)))
            SELECT id, platform, handle FROM registration
            WHERE (id IN (SELECT id FROM users) OR parent_id IN (SELECT id FROM users)) AND id > \(after)
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
                WHERE (r.owner = \(user)
                       OR r.id IN (SELECT registration_id FROM registration_tag WHERE tag = ANY(\(tags))))
                  AND (\(hub) = '' OR r.hub = \(hub)))
            DELETE FROM registration
            WHERE id = ANY(\(ids)) AND (id IN (SELECT id FROM users) OR parent_id IN (SELECT id FROM users))
            RETURNING id
            """)
        return Int64(rows.count)
    }
}

/// One of a user's devices, whole: an export's row. `document` is NH's JSON of an installation (or
/// of one of its templates, with `templateName`); nil for a tutorial registration.
public struct UserDeviceRecord: Sendable {
    public var id: String
    public var hub: String
    public var platform: Platform
    public var handle: String
    public var tags: [String]
    public var document: [UInt8]?
    public var templateName: String?
    public var createdAt: Int64
    public var updatedAt: Int64
    public var expired: Bool
}

extension SQLiteRegistrations {
    func exportUserDevices(user: String, hub: String, after: String, limit: Int) throws -> [UserDeviceRecord] {
        try db.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT x.id, x.hub, x.platform, x.handle, x.document, x.template_name, x.created_at, x.updated_at,
                           x.expired,
                           (SELECT json_group_array(tag) FROM (
                                SELECT tag FROM registration_tag t WHERE t.registration_id = x.id ORDER BY tag)) AS tags
                    FROM registration x
                    WHERE (x.id IN (SELECT r.id FROM registration r WHERE \(Self.isUsers))
                           OR x.parent_id IN (SELECT r.id FROM registration r WHERE \(Self.isUsers)))
                      AND x.id > ?
                    ORDER BY x.id LIMIT ?
                    """,
                arguments: Self.arguments(user, hub) + Self.arguments(user, hub) + [after, limit]
            ).map { row in
                let tags = (try? JSONDecoder().decode([String].self, from: Data((row["tags"] as String).utf8))) ?? []
                return UserDeviceRecord(
                    id: row["id"], hub: row["hub"], platform: Platform(rawValue: row["platform"]),
                    handle: row["handle"],
                    tags: tags, document: (row["document"] as Data?).map { [UInt8]($0) },
                    templateName: row["template_name"], createdAt: row["created_at"], updatedAt: row["updated_at"],
                    expired: row["expired"])
            }
        }
    }
}

extension SQLiteRegistrationStore {
    nonisolated(nonsending) public func exportUserDevices(user: String, hub: String, after: String, limit: Int)
        async throws -> [UserDeviceRecord]
    {
        try RegistrationErasure.checkPage(limit)
        return try tables.exportUserDevices(user: user, hub: hub, after: after, limit: limit)
    }
}

extension PostgresRegistrationStore {
    nonisolated(nonsending) public func exportUserDevices(user: String, hub: String, after: String, limit: Int)
        async throws -> [UserDeviceRecord]
    {
        try RegistrationErasure.checkPage(limit)
        let tags = RegistrationErasure.tags(of: user)
        let rows = try await db.rows(
            """
            WITH users AS (
                SELECT r.id FROM registration r
                WHERE (r.owner = \(user)
                       OR r.id IN (SELECT registration_id FROM registration_tag WHERE tag = ANY(\(tags))))
                  AND (\(hub) = '' OR r.hub = \(hub)))
            SELECT x.id, x.hub, x.platform, x.handle, x.document, x.template_name, x.created_at, x.updated_at, x.expired,
                   coalesce((SELECT array_agg(t.tag ORDER BY t.tag) FROM registration_tag t WHERE t.registration_id = x.id), '{}')
            FROM registration x
            WHERE (x.id IN (SELECT id FROM users) OR x.parent_id IN (SELECT id FROM users)) AND x.id > \(after)
            ORDER BY x.id LIMIT \(Int64(limit))
            """)
        return try rows.map { row in
            let (id, hub, platform, handle, document, templateName, created, updated, expired, tags) = try row.decode(
                (String, String, Int32, String, ByteBuffer?, String?, Int64, Int64, Int32, [String]).self)
            return UserDeviceRecord(
                id: id, hub: hub, platform: Platform(rawValue: platform), handle: handle, tags: tags,
                document: document.map { Array($0.readableBytesView) }, templateName: templateName, createdAt: created,
                updatedAt: updated, expired: expired != 0)
        }
    }
}
