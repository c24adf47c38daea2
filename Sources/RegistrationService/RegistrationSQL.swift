import Foundation
import HeraldModel
import HeraldProto
import HeraldSQL
import HeraldService
import NotificationHubs

/// The registration queries whose shape depends on the request: audiences, device and installation
/// lists, NH registration feeds. Written once for both databases (the tables have the same columns
/// on both, `expired` an integer on both); where the dialects differ, the difference is a
/// ``SQLFragment``.
enum RegistrationSQL {
    /// A row's tags, sorted, joined by newlines (no tag holds one: ``RegistrationRules``); NULL when
    /// it has none. `alias` names the row.
    static func tags(of alias: String) -> SQLFragment {
        SQLFragment(
            sqlite:
                "(SELECT group_concat(tag, char(10)) FROM (SELECT t.tag FROM registration_tag t WHERE t.registration_id = \(alias).id ORDER BY t.tag))",
            postgres:
                "(SELECT string_agg(t.tag, chr(10) ORDER BY t.tag) FROM registration_tag t WHERE t.registration_id = \(alias).id)"
        )
    }

    /// A tags column as ``tags(of:)`` reads it.
    static func tagList(_ value: String?) -> [String] {
        value.map { $0.split(separator: "\n").map(String.init) } ?? []
    }

    /// The order rows were made in (SQLite's rowid, PostgreSQL's identity column).
    static let insertionOrder = SQLFragment(sqlite: "rowid", postgres: "seq")

    /// One page of an audience: registrations after `after` by id, read from `driver`'s entries in
    /// the (tag, registration_id) key when given (its own order: no sort), else from every
    /// registration of the hub, filtered by `expression` (evaluated in SQL, each tag an index
    /// look-up) when given. Devices, or (a template send) installation templates: never both.
    static func audience(
        driver: String?, expression: TagExpression.Node?, platform: Platform, hub: String, templates: Bool,
        after: String, limit: Int
    ) -> SQLQuery {
        var q: SQLQuery = "SELECT r.id, r.owner, r.platform, r.handle, r.updated_at, r.hub, r.installation_id"
        if templates { q += ", r.template_name, r.document" }
        let order = from(driver: driver, after: after, into: &q)
        q += " AND r.platform != 0 AND r.hub = \(hub) AND r.expired = 0"
        q += templates ? " AND r.template_name IS NOT NULL" : " AND r.template_name IS NULL"
        if platform != .unspecified { q += " AND r.platform = \(Int64(platform.rawValue))" }
        if let expression { q += " AND (\(condition(expression)))" }
        q += " ORDER BY \(raw: order) LIMIT \(Int64(limit))"
        return q
    }

    /// ` FROM …` of a page of registrations after `after` by id: read from `driver`'s entries in
    /// the (tag, registration_id) key when given (its own order: no sort), else from every
    /// registration. Ends inside the WHERE clause; returns the column to order by.
    private static func from(driver: String?, after: String, into q: inout SQLQuery) -> String {
        guard let driver else {
            q += " FROM registration r WHERE r.id > \(after)"
            return "r.id"
        }
        q += " FROM registration_tag d JOIN registration r ON r.id = d.registration_id WHERE d.tag = \(driver)"
        // The same bound on r.id (equal to d.registration_id): PostgreSQL then starts both sides
        // of its merge join at the page instead of reading the hub's registrations from the
        // first one on every page (50,000 devices: 4 ms a page, not 0.6).
        q += " AND d.registration_id > \(after) AND r.id > \(after)"
        return "d.registration_id"
    }

    /// A page of a hub's installations by installation id after `after`, filtered by a tag
    /// expression, user id and platform.
    static func installations(
        hub: String, expression: TagExpression?, userID: String?, platform: Platform, after: String, limit: Int
    ) -> SQLQuery {
        var q: SQLQuery = "SELECT r.document, r.expired, r.updated_at FROM registration r WHERE r.hub = \(hub)"
        q += " AND r.installation_id IS NOT NULL AND r.installation_id > \(after)"
        if let userID { q += " AND r.user_id = \(userID)" }
        if platform != .unspecified { q += " AND r.platform = \(Int64(platform.rawValue))" }
        if let expression { q += " AND (\(condition(expression.root)))" }
        q += " ORDER BY r.installation_id LIMIT \(Int64(limit))"
        return q
    }

    /// One page of a hub's devices for ListDevices: registrations and installations (never their
    /// templates) after `after` by id, with their tags and `expired`. A tag expression with a
    /// one-tag cover drives the page from that tag's index entries, as audiences do, so a rare tag
    /// does not test every device of the hub.
    static func devices(
        _ dialect: SQLDialect, hub: String, user: String?, expression: TagExpression?, platform: Platform,
        handlePrefix: String?, after: String, limit: Int
    ) -> SQLQuery {
        var q: SQLQuery =
            "SELECT r.id, r.owner, r.platform, r.handle, r.updated_at, r.installation_id, r.expired, \(tags(of: "r"))"
        let cover = expression?.cover
        let order = from(driver: cover?.count == 1 ? cover?.first : nil, after: after, into: &q)
        q += " AND r.hub = \(hub) AND r.platform != 0 AND r.template_name IS NULL"
        if let user {
            // A user's devices carry their system tag (registrations "username:", installations
            // "$UserId:"): read from the tag index in id order, not by testing every device.
            q += " AND r.id IN (SELECT u.registration_id FROM registration_tag u WHERE u.tag IN ("
            q += "\(list: Names.userSystemTags(of: user))) AND u.registration_id > \(after))"
        }
        if platform != .unspecified { q += " AND r.platform = \(Int64(platform.rawValue))" }
        if let handlePrefix {
            // substr counts characters (code points) on both databases. On SQLite (byte order) a
            // range on the handle index finds the few candidates first; PostgreSQL's handle index
            // follows the database's collation, where such a range is not a prefix.
            if dialect == .sqlite {
                q += " AND r.handle >= \(handlePrefix) AND r.handle < \(handlePrefix + "\u{10FFFF}")"
            }
            q +=
                " AND substr(r.handle, 1, CAST(\(Int64(handlePrefix.unicodeScalars.count)) AS INTEGER)) = \(handlePrefix)"
        }
        if let expression { q += " AND (\(condition(expression.root)))" }
        q += " ORDER BY \(raw: order) LIMIT \(Int64(limit))"
        return q
    }

    /// What a registration read selects (``HubRegistrationRules/stored(nhDocument:installation:etag:createdAt:updatedAt:expired:)``).
    static let hubRegistrationColumns =
        "r.nh_document, CASE WHEN r.nh_id IS NULL THEN r.document END AS document, r.etag, r.created_at, r.updated_at, r.expired"

    /// A page of a hub's NH registrations and installations (NH lists both) by NH id (an
    /// installation's: its installation id) and row id, after `after`: all, those with one handle
    /// (the handle index), or those with one tag (the tag's index entries). Columns:
    /// ``hubRegistrationColumns``, then the row id and the NH id (the entry's cursor).
    static func hubRegistrations(
        hub: String, handle: String?, tag: String?, after: HubRegistrationRules.FeedCursor, limit: Int
    ) -> SQLQuery {
        let key = "COALESCE(r.nh_id, r.installation_id)"
        var q: SQLQuery = "SELECT \(raw: hubRegistrationColumns), r.id, \(raw: key) FROM "
        if let tag {
            q += "registration_tag t JOIN registration r ON r.id = t.registration_id WHERE t.tag = \(tag) AND"
        } else {
            q += "registration r WHERE"
        }
        q += " r.hub = \(hub) AND (r.nh_id IS NOT NULL OR r.installation_id IS NOT NULL)"
        if after.row.isEmpty {
            q += " AND \(raw: key) > \(after.key)"
        } else {
            q += """
                 AND (\(raw: key) > \(after.key) OR (\(raw: key) = \(after.key) AND r.id > \(after.row)))
                """
        }
        if let handle { q += " AND r.handle = \(handle)" }
        q += " ORDER BY \(raw: key), r.id LIMIT \(Int64(limit))"
        return q
    }

    /// Adds `tags` to row `id`, in one statement; nil when there are none. A tag given twice is kept once.
    static func insertTags(_ tags: [String], of id: String) -> SQLQuery? {
        guard !tags.isEmpty else { return nil }
        var q: SQLQuery = "INSERT INTO registration_tag (tag, registration_id) VALUES "
        for (index, tag) in tags.enumerated() {
            q += index == 0 ? "(\(tag), \(id))" as SQLQuery : ", (\(tag), \(id))"
        }
        q += " ON CONFLICT DO NOTHING"
        return q
    }

    /// "r-" and 24 base-32 characters: 120 random bits, unguessable. Installations use "i-",
    /// their templates "t-".
    static func newID(prefix: String = "r-") -> String {
        prefix + SecureRandom.base32(24)
    }

    /// One line of the NDJSON export: `{"kind":"installation","installation":{…}}`.
    static func exportLine(_ installation: Installation) throws -> [UInt8] {
        try line([
            "kind": "installation",
            "installation": try JSONSerialization.jsonObject(with: Data(try installation.json())),
        ])
    }

    /// One line of the NDJSON export: `{"kind":"registration","registrationId":…,"tags":[…],…}`.
    static func exportLine(_ registration: Registration) throws -> [UInt8] {
        try line([
            "kind": "registration", "registrationId": registration.registrationID, "owner": registration.owner,
            "platform": registration.platform.name, "handle": registration.handle, "tags": registration.tags,
            "updatedAtUnixMs": registration.updatedAtUnixMs,
        ])
    }

    private static func line(_ object: [String: Any]) throws -> [UInt8] {
        try Array(jsonData(object, options: [.sortedKeys, .withoutEscapingSlashes])) + [
            UInt8(ascii: "\n")
        ]
    }

    /// A tag expression as an SQL condition on `r.id`: each tag an `EXISTS` on the (tag,
    /// registration_id) primary key, tags bound as parameters.
    static func condition(_ node: TagExpression.Node) -> SQLQuery {
        switch node {
        case .tag(let tag):
            return "EXISTS (SELECT 1 FROM registration_tag t WHERE t.tag = \(tag) AND t.registration_id = r.id)"
        case .not(let inner):
            return "NOT (\(condition(inner)))"
        case .and(let nodes), .or(let nodes):
            let separator: SQLQuery = if case .and = node { " AND " } else { " OR " }
            var q: SQLQuery = ""
            for (index, node) in nodes.enumerated() {
                if index > 0 { q += separator }
                q += "(\(condition(node)))"
            }
            return q
        }
    }
}
