import Foundation
import GRDB
public import HeraldModel
public import HeraldProto

/// A statement built once for both stores: SQLite numbers its parameters `?`, PostgreSQL `$1…`;
/// the rest of the audience and listing queries is the same SQL on both (the tables have the same
/// columns, `expired` an integer on both).
struct SQLStatement {
    enum Dialect { case sqlite, postgres }
    enum Value {
        case text(String)
        case integer(Int64)
    }

    let dialect: Dialect
    var text = ""
    var values: [Value] = []

    init(_ dialect: Dialect, _ text: String = "") {
        self.dialect = dialect
        self.text = text
    }

    /// Appends a parameter's value and returns its placeholder.
    mutating func bind(_ value: Value) -> String {
        values.append(value)
        return dialect == .sqlite ? "?" : "$\(values.count)"
    }

    mutating func bind(_ text: String) -> String { bind(.text(text)) }
    mutating func bind(_ number: Int64) -> String { bind(.integer(number)) }

    static func += (statement: inout SQLStatement, text: String) { statement.text += text }
}

/// The registration queries whose shape depends on the request: audiences and installation lists.
enum RegistrationSQL {
    /// One page of an audience: registrations after `after` by id, read from `driver`'s entries in
    /// the (tag, registration_id) key when given (its own order: no sort), else from every
    /// registration of the hub, filtered by `expression` (evaluated in SQL, each tag an index
    /// look-up) when given. Devices, or (a template send) installation templates: never both.
    static func audience(
        _ dialect: SQLStatement.Dialect, driver: String?, expression: TagExpression.Node?, platform: Platform,
        hub: String,
        templates: Bool, after: String, limit: Int
    ) -> SQLStatement {
        var q = SQLStatement(
            dialect, "SELECT r.id, r.owner, r.platform, r.handle, r.updated_at, r.hub, r.installation_id")
        q += templates ? ", r.template_name, r.document" : ""
        let order = from(driver: driver, after: after, into: &q)
        q += " AND r.platform != 0 AND r.hub = \(q.bind(hub)) AND r.expired = 0"
        q += templates ? " AND r.template_name IS NOT NULL" : " AND r.template_name IS NULL"
        if platform != .unspecified { q += " AND r.platform = \(q.bind(Int64(platform.rawValue)))" }
        if let expression { q += " AND (\(condition(expression, into: &q)))" }
        q += " ORDER BY \(order) LIMIT \(q.bind(Int64(limit)))"
        return q
    }

    /// ` FROM …` of a page of registrations after `after` by id: read from `driver`'s entries in
    /// the (tag, registration_id) key when given (its own order: no sort), else from every
    /// registration. Ends inside the WHERE clause; returns the column to order by.
    private static func from(driver: String?, after: String, into q: inout SQLStatement) -> String {
        guard let driver else {
            q += " FROM registration r WHERE r.id > \(q.bind(after))"
            return "r.id"
        }
        q += " FROM registration_tag d JOIN registration r ON r.id = d.registration_id WHERE d.tag = \(q.bind(driver))"
        // The same bound on r.id (equal to d.registration_id): PostgreSQL then starts both sides
        // of its merge join at the page instead of reading the hub's registrations from the
        // first one on every page (50,000 devices: 4 ms a page, not 0.6).
        q += " AND d.registration_id > \(q.bind(after)) AND r.id > \(q.bind(after))"
        return "d.registration_id"
    }

    /// The driver and condition of a tag expression's audience: a one-tag ``TagExpression/cover``
    /// (`a`, `a && !b`, `a && (b || c)`) drives the page from that tag's index entries; otherwise
    /// (`a || b`, `!a`) every registration after `after` is tested.
    static func audience(
        _ dialect: SQLStatement.Dialect, expression: TagExpression, platform: Platform, hub: String, templates: Bool,
        after: String,
        limit: Int
    ) -> SQLStatement {
        if case .tag(let tag) = expression.root {
            return audience(
                dialect, driver: tag, expression: nil, platform: platform, hub: hub, templates: templates, after: after,
                limit: limit)
        }
        let cover = expression.cover
        return audience(
            dialect, driver: cover?.count == 1 ? cover?.first : nil, expression: expression.root, platform: platform,
            hub: hub,
            templates: templates, after: after, limit: limit)
    }

    /// A page of a hub's installations by installation id after `after`, filtered by a tag
    /// expression, user id and platform.
    static func installations(
        _ dialect: SQLStatement.Dialect, hub: String, expression: TagExpression?, userID: String?, platform: Platform,
        after: String,
        limit: Int
    ) -> SQLStatement {
        var q = SQLStatement(dialect, "SELECT r.document, r.expired, r.updated_at FROM registration r WHERE r.hub = ")
        q += q.bind(hub)
        q += " AND r.installation_id IS NOT NULL AND r.installation_id > \(q.bind(after))"
        if let userID { q += " AND r.user_id = \(q.bind(userID))" }
        if platform != .unspecified { q += " AND r.platform = \(q.bind(Int64(platform.rawValue)))" }
        if let expression { q += " AND (\(condition(expression.root, into: &q)))" }
        q += " ORDER BY r.installation_id LIMIT \(q.bind(Int64(limit)))"
        return q
    }

    /// One page of a hub's devices for ListDevices: registrations and installations (never their
    /// templates) after `after` by id, with their tags (SQLite: joined by newlines; PostgreSQL: an
    /// array) and `expired`. A tag expression with a one-tag cover drives the page from that tag's
    /// index entries, as audiences do, so a rare tag does not test every device of the hub.
    static func devices(
        _ dialect: SQLStatement.Dialect, hub: String, user: String?, expression: TagExpression?, platform: Platform,
        handlePrefix: String?, after: String, limit: Int
    ) -> SQLStatement {
        var q = SQLStatement(
            dialect, "SELECT r.id, r.owner, r.platform, r.handle, r.updated_at, r.installation_id, r.expired, ")
        q +=
            dialect == .sqlite
            ? "(SELECT group_concat(tag, char(10)) FROM (SELECT t.tag FROM registration_tag t WHERE t.registration_id = r.id ORDER BY t.tag))"
            : "coalesce((SELECT array_agg(t.tag ORDER BY t.tag) FROM registration_tag t WHERE t.registration_id = r.id), '{}')"
        let cover = expression?.cover
        let order = from(driver: cover?.count == 1 ? cover?.first : nil, after: after, into: &q)
        q += " AND r.hub = \(q.bind(hub)) AND r.platform != 0 AND r.template_name IS NULL"
        if let user {
            // A user's devices carry their system tag (registrations "username:", installations
            // "$UserId:"): read from the tag index in id order, not by testing every device.
            q += " AND r.id IN (SELECT u.registration_id FROM registration_tag u WHERE u.tag IN ("
            q +=
                "\(q.bind(RegistrationRules.userTag(user))), \(q.bind(Names.installationUserTag(user)))) AND u.registration_id > \(q.bind(after)))"
        }
        if platform != .unspecified { q += " AND r.platform = \(q.bind(Int64(platform.rawValue)))" }
        if let handlePrefix {
            // substr counts characters (code points) on both databases. On SQLite (byte order) a
            // range on the handle index finds the few candidates first; PostgreSQL's handle index
            // follows the database's collation, where such a range is not a prefix.
            if dialect == .sqlite {
                q += " AND r.handle >= \(q.bind(handlePrefix)) AND r.handle < \(q.bind(handlePrefix + "\u{10FFFF}"))"
            }
            q +=
                " AND substr(r.handle, 1, CAST(\(q.bind(Int64(handlePrefix.unicodeScalars.count))) AS INTEGER)) = \(q.bind(handlePrefix))"
        }
        if let expression { q += " AND (\(condition(expression.root, into: &q)))" }
        q += " ORDER BY \(order) LIMIT \(q.bind(Int64(limit)))"
        return q
    }

    /// "r-" and 24 base-32 characters: 120 random bits, unguessable. Installations use "i-",
    /// their templates "t-".
    static func newID(prefix: String = "r-") -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567")
        var generator = SystemRandomNumberGenerator()
        return prefix + String((0..<24).map { _ in alphabet[Int(generator.next(upperBound: UInt8(32)))] })
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
        try Array(JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) + [
            UInt8(ascii: "\n")
        ]
    }

    /// A tag expression as an SQL condition on `r.id`: each tag an `EXISTS` on the (tag,
    /// registration_id) primary key, tags bound as parameters of `statement`.
    static func condition(_ node: TagExpression.Node, into statement: inout SQLStatement) -> String {
        switch node {
        case .tag(let tag):
            return
                "EXISTS (SELECT 1 FROM registration_tag t WHERE t.tag = \(statement.bind(tag)) AND t.registration_id = r.id)"
        case .not(let inner):
            return "NOT (\(condition(inner, into: &statement)))"
        case .and(let nodes), .or(let nodes):
            var parts: [String] = []
            for node in nodes { parts.append("(\(condition(node, into: &statement)))") }
            if case .and = node { return parts.joined(separator: " AND ") }
            return parts.joined(separator: " OR ")
        }
    }
}

extension SQLStatement {
    var sqliteArguments: StatementArguments {
        StatementArguments(
            values.map { value -> any DatabaseValueConvertible in
                switch value {
                case .text(let text): text
                case .integer(let number): number
                }
            })
    }
}
