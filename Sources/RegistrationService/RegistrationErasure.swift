import Foundation
import HeraldModel
public import HeraldProto
import HeraldSQL
import HeraldService
import NotificationHubs

/// Erase, registration's part: which devices are a user's, on both stores.
///
/// A user's devices: tutorial registrations they own (or tagged `username:<user>`), installations
/// with their `userId` (or tagged `$UserId:<user>`), and those installations' templates (rows
/// whose parent is one of them). `hub` empty: every hub.
///
/// Found through indexes only: the owner index, and the tag index for the two tags, a page at a
/// time (``pageIDs(_:hub:after:limit:)``). An installation
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

extension RegistrationErasure {
    /// The ids of the user's rows (see ``RegistrationErasure``): the rows themselves, and the
    /// templates whose installation is one of them, as `… IN (…) OR parent_id IN (…)` on `alias`.
    static func isUsers(_ user: String, hub: String, alias: String) -> SQLQuery {
        let users: SQLQuery = """
            SELECT r.id FROM registration r
            WHERE (r.owner = \(user) OR r.id IN (SELECT registration_id FROM registration_tag WHERE tag IN (\(list: tags(of: user)))))
              AND (\(hub) = '' OR r.hub = \(hub))
            """
        return "(\(raw: alias).id IN (\(users)) OR \(raw: alias).parent_id IN (\(users)))"
    }
}

extension RegistrationErasure {
    /// The ids of one page of the user's devices: the lowest `limit` ids above `after` of the rows
    /// ``isUsers(_:hub:alias:)`` picks, read as the first `limit` of three index-ordered streams
    /// (rows the user owns, by `registration_owner_id`; rows carrying each of the two user tags, by
    /// the tag key) rather than as the person's whole set worked out again for every page, which
    /// made an export of 100,000 devices take 175 s. A template row carries its installation's
    /// tags (``InstallationRows/templates(of:parentID:hub:expired:now:)``), and installations have
    /// no owner, so the tag streams find the templates `parent_id` names in ``isUsers``.
    static func pageIDs(_ user: String, hub: String, after: String, limit: Int) -> SQLQuery {
        let tags = tags(of: user)
        let n = Int64(limit)
        return """
            SELECT id FROM (
                SELECT id FROM registration WHERE owner = \(user) AND id > \(after) AND (\(hub) = '' OR hub = \(hub))
                ORDER BY id LIMIT \(n)) owned
            UNION SELECT id FROM (
                SELECT t.registration_id AS id FROM registration_tag t JOIN registration r ON r.id = t.registration_id
                WHERE t.tag = \(tags[0]) AND t.registration_id > \(after) AND (\(hub) = '' OR r.hub = \(hub))
                ORDER BY t.registration_id LIMIT \(n)) tutorial
            UNION SELECT id FROM (
                SELECT t.registration_id AS id FROM registration_tag t JOIN registration r ON r.id = t.registration_id
                WHERE t.tag = \(tags[1]) AND t.registration_id > \(after) AND (\(hub) = '' OR r.hub = \(hub))
                ORDER BY t.registration_id LIMIT \(n)) installations
            """
    }
}

extension SQLRegistrationStore {
    nonisolated(nonsending) public func userDevices(user: String, hub: String, after: String, limit: Int)
        async throws -> [UserDevice]
    {
        try RegistrationErasure.checkPage(limit)
        return try await db.query(
            """
            SELECT x.id, x.platform, x.handle FROM registration x
            WHERE x.id IN (\(RegistrationErasure.pageIDs(user, hub: hub, after: after, limit: limit)))
            ORDER BY x.id LIMIT \(Int64(limit))
            """
        ) { row in
            UserDevice(registrationID: try row[0], platform: Platform(rawValue: try row[1]), handle: try row[2])
        }
    }

    /// Deletes those of `ids` still the user's; their tags and templates go with them (cascade).
    nonisolated(nonsending) public func eraseUserDevices(user: String, hub: String, ids: [String]) async throws
        -> Int64
    {
        guard !ids.isEmpty else { return 0 }
        try RegistrationErasure.checkPage(ids.count)
        return Int64(
            try await db.execute(
                """
                DELETE FROM registration
                WHERE id IN (\(list: ids)) AND \(RegistrationErasure.isUsers(user, hub: hub, alias: "registration"))
                """))
    }

    nonisolated(nonsending) public func exportUserDevices(user: String, hub: String, after: String, limit: Int)
        async throws -> [UserDeviceRecord]
    {
        try RegistrationErasure.checkPage(limit)
        return try await db.query(
            """
            SELECT x.id, x.hub, x.platform, x.handle, x.document, x.template_name, x.created_at, x.updated_at,
                   x.expired, \(RegistrationSQL.tags(of: "x"))
            FROM registration x
            WHERE x.id IN (\(RegistrationErasure.pageIDs(user, hub: hub, after: after, limit: limit)))
            ORDER BY x.id LIMIT \(Int64(limit))
            """
        ) { row in
            UserDeviceRecord(
                id: try row[0], hub: try row[1], platform: Platform(rawValue: try row[2]), handle: try row[3],
                tags: RegistrationSQL.tagList(try row[9]), document: try row[4], templateName: try row[5],
                createdAt: try row[6], updatedAt: try row[7], expired: try row[8])
        }
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
