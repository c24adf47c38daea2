import Foundation
import GRDB
public import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldService

/// NH registrations (the Registrations API) in the registration table: one row each (id "n-…", no
/// owner, `nh_id` the NH registration id, unique per hub), so the audience queries that serve
/// tutorial registrations and installations serve them too. A template registration's row has
/// `template_name` set (empty when unnamed) and the template's JSON in `document`, as an
/// installation template's row has, so template sends render it and native sends skip it. The
/// registration itself is kept as `HubRegistration` protobuf in `nh_document`; `etag` counts its
/// writes.
public enum HubRegistrationRules {
    public static let maxIDLength = Installation.maxIDLength
    /// A page of a listing when the caller does not say (NH's default `$top` is 100).
    public static let defaultPage = 100
    public static let maxPage = 1000
    /// About how many bytes of registrations one page holds at most (templates make them large).
    public static let maxPageBytes = 4 << 20

    /// Checks what a caller may store and normalises it: the id, the platform, the handle by the
    /// platform's rules (a browser's subscription to canonical JSON), tags, and a template's body,
    /// headers, expiry and priority as an installation template's are checked. Server-kept fields
    /// (ETag, times, expired) are cleared.
    /// `trusted`: the caller's key has Manage (a back end), so `username:` tags are its to set.
    public static func validated(
        _ registration: HubRegistration, hosts: RegistrationRules.PushHosts, trusted: Bool = false
    ) throws -> HubRegistration {
        var r = registration
        try validateID(r.registrationID)
        guard [.apns, .fcm, .wns, .browser].contains(r.platform) else {
            throw ServiceError.invalidArgument(
                "platform: NH registrations here are Apple, FcmV1, Windows or Browser (native or template)")
        }
        if r.platform == .browser {
            r.handle = try Installation.pushChannel(r.handle, platform: .browser)
        }
        guard !r.handle.isEmpty else { throw ServiceError.invalidArgument("the registration needs a device handle") }
        try RegistrationRules.validateHandle(r.handle, platform: r.platform, hosts: hosts)
        r.tags = try RegistrationRules.validateTags(r.tags, allowUserTags: trusted)
        guard r.pushVariables.count <= 64,
            r.pushVariables.allSatisfy({ $0.name.utf8.count <= 120 && $0.value.utf8.count <= 1024 })
        else {
            throw ServiceError.invalidArgument(
                "PushVariables: at most 64, names at most 120 bytes, values at most 1024 bytes")
        }
        if r.isTemplate {
            guard r.templateName.utf8.count <= 200 else {
                throw ServiceError.invalidArgument("TemplateName is at most 200 bytes")
            }
            guard r.priority.isEmpty || r.priority == "10" || r.priority == "5" else {
                throw ServiceError.invalidArgument("Priority is 10 or 5")
            }
            guard r.headers.count <= 32 else {
                throw ServiceError.invalidArgument("at most 32 template headers")
            }
            try template(of: r).validate(name: r.templateName.isEmpty ? "(unnamed)" : r.templateName)
        } else {
            guard r.bodyTemplate.isEmpty, r.headers.isEmpty, r.expiry.isEmpty, r.priority.isEmpty,
                r.templateName.isEmpty
            else {
                throw ServiceError.invalidArgument(
                    "a native registration has no BodyTemplate, headers, Expiry, Priority or TemplateName")
            }
        }
        r.etag = 0
        r.createdAtUnixMs = 0
        r.updatedAtUnixMs = 0
        r.expired = false
        return r
    }

    public static func validateID(_ id: String) throws {
        guard Installation.isEntityID(id) else {
            throw ServiceError.invalidArgument(
                "registration id must be 1 to \(maxIDLength) letters, digits, periods (.), hyphens (-) and underscores (_)"
            )
        }
    }

    /// The template as dispatch renders it: its body, its headers (a Priority becomes
    /// `apns-priority` unless a header says otherwise) and its expiry.
    static func template(of r: HubRegistration) -> Installation.Template {
        var headers: [String: String] = [:]
        for header in r.headers { headers[header.name] = header.value }
        if !r.priority.isEmpty, !headers.keys.contains(where: { $0.lowercased() == "apns-priority" }) {
            headers["apns-priority"] = r.priority
        }
        return Installation.Template(body: r.bodyTemplate, headers: headers, expiry: r.expiry.isEmpty ? nil : r.expiry)
    }

    /// What the row's `document` holds: the template's JSON for a template registration.
    static func document(of r: HubRegistration) -> Data? {
        r.isTemplate ? Data(template(of: r).wireJSON.utf8) : nil
    }

    /// A stored registration with its row's columns (the document does not repeat them); or an
    /// installation's row (`nhDocument` nil) as NH shows an installation among registrations: a
    /// native registration whose id is the installation id, its tags with `$InstallationId:{…}`
    /// (and `$UserId:{…}`), its ETag the time of its last write.
    static func stored(
        nhDocument: [UInt8]?, installation: [UInt8]?, etag: Int64, createdAt: Int64, updatedAt: Int64, expired: Bool
    ) throws -> HubRegistration {
        var r: HubRegistration
        if let nhDocument {
            r = try HubRegistration(serializedBytes: nhDocument)
            r.etag = etag
        } else {
            let stored = try Installation.stored(installation ?? [])
            r = HubRegistration(
                registrationID: stored.installationID, platform: stored.platform, handle: stored.pushChannel,
                tags: stored.audienceTags)
            r.pushVariables = stored.pushVariables.keys.sorted().map {
                HubRegistrationField(name: $0, value: stored.pushVariables[$0]!)
            }
            r.etag = updatedAt
        }
        r.createdAtUnixMs = createdAt
        r.updatedAtUnixMs = updatedAt
        r.expired = expired
        return r
    }

    /// The ETag check of a write or delete: `ifMatch` 0 matches anything.
    static func checkETag(_ ifMatch: Int64, stored: Int64?) throws {
        guard ifMatch != 0 else { return }
        guard let stored else { throw ServiceError.notFound("Registration not found.") }
        guard stored == ifMatch else {
            throw ServiceError(
                .failedPrecondition,
                "the registration's ETag is \(stored), not \(ifMatch): it changed since it was read")
        }
    }
}

extension SQLiteRegistrations {
    static func registerHubRegistrations(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v5-hub-registrations") { db in
            try db.execute(
                sql: """
                    ALTER TABLE registration ADD COLUMN nh_id TEXT;
                    ALTER TABLE registration ADD COLUMN etag INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE registration ADD COLUMN nh_document BLOB;
                    CREATE UNIQUE INDEX registration_nh ON registration(hub, nh_id) WHERE nh_id IS NOT NULL;
                    """)
        }
    }

    /// Creates or replaces, in the caller's transaction.
    func putHubRegistration(
        hub: String, _ registration: HubRegistration, ifMatch: Int64, createOnly: Bool, maxRegistrations: Int64,
        in db: Database
    ) throws -> (HubRegistration, created: Bool) {
        var r = registration
        let existing = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT id, etag, created_at FROM registration WHERE hub = ? AND nh_id = ?"),
            arguments: [hub, r.registrationID])
        if existing != nil, createOnly {
            throw ServiceError(.alreadyExists, "registration \(r.registrationID) exists")
        }
        try HubRegistrationRules.checkETag(ifMatch, stored: existing?["etag"])
        if existing == nil, maxRegistrations > 0 {
            let count =
                try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT COUNT(*) FROM registration WHERE hub = ? AND nh_id IS NOT NULL"),
                    arguments: [hub]) ?? 0
            guard count < maxRegistrations else {
                throw ServiceError(
                    .resourceExhausted,
                    "hub \(hub) holds its limit of \(maxRegistrations) registrations (herald hubs limits \(hub))")
            }
        }
        let now = now()
        r.etag = (existing?["etag"] as Int64? ?? 0) + 1
        r.createdAtUnixMs = existing?["created_at"] ?? now
        r.updatedAtUnixMs = now
        r.expired = false
        let stored = Data(try r.serializedBytes() as [UInt8])
        let templateName: String? = r.isTemplate ? r.templateName : nil
        let id: String
        if let existing {
            id = existing["id"]
            try db.cachedStatement(
                sql: """
                    UPDATE registration SET platform = ?, handle = ?, updated_at = ?, document = ?, expired = 0,
                        template_name = ?, etag = ?, nh_document = ? WHERE id = ?
                    """
            ).execute(arguments: [
                r.platform.rawValue, r.handle, now, HubRegistrationRules.document(of: r), templateName, r.etag, stored,
                id,
            ])
            try db.cachedStatement(sql: "DELETE FROM registration_tag WHERE registration_id = ?").execute(arguments: [
                id
            ])
        } else {
            id = RegistrationSQL.newID(prefix: "n-")
            try db.cachedStatement(
                sql: """
                    INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, document, expired,
                        template_name, nh_id, etag, nh_document)
                    VALUES (?, '', ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)
                    """
            ).execute(arguments: [
                id, r.platform.rawValue, r.handle, now, now, hub, HubRegistrationRules.document(of: r), templateName,
                r.registrationID, r.etag, stored,
            ])
        }
        let tag = try db.cachedStatement(
            sql: "INSERT OR IGNORE INTO registration_tag (tag, registration_id) VALUES (?, ?)")
        for value in r.tags { try tag.execute(arguments: [value, id]) }
        return (r, existing == nil)
    }

    /// The registration with NH id `id`, else the installation with that id (NH lists
    /// installations among registrations).
    public func hubRegistration(hub: String, id: String) throws -> HubRegistration? {
        try db.read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT \(RegistrationSQL.hubRegistrationColumns) FROM registration r
                        WHERE r.hub = ? AND (r.nh_id = ? OR r.installation_id = ?) ORDER BY r.nh_id IS NULL LIMIT 1
                        """),
                arguments: [hub, id, id]
            ).map(Self.hubRegistration)
        }
    }

    /// Deletes the registration with NH id `id`, else the installation with that id.
    func deleteHubRegistration(hub: String, id: String, ifMatch: Int64, in db: Database) throws {
        let row = try Row.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT id, CASE WHEN nh_id IS NULL THEN updated_at ELSE etag END AS etag FROM registration
                    WHERE hub = ? AND (nh_id = ? OR installation_id = ?) ORDER BY nh_id IS NULL LIMIT 1
                    """),
            arguments: [hub, id, id])
        guard let row else { throw ServiceError.notFound("Registration not found.") }
        try HubRegistrationRules.checkETag(ifMatch, stored: row["etag"])
        try db.cachedStatement(sql: "DELETE FROM registration WHERE id = ?").execute(arguments: [row["id"] as String])
    }

    public func listHubRegistrations(hub: String, handle: String?, tag: String?, after: String, limit: Int) throws
        -> [HubRegistration]
    {
        let q = RegistrationSQL.hubRegistrations(
            .sqlite, hub: hub, handle: handle, tag: tag, after: after, limit: limit)
        return try db.read { db in
            try Row.fetchAll(db, sql: q.text, arguments: q.sqliteArguments).map(Self.hubRegistration)
        }
    }

    private static func hubRegistration(_ row: Row) throws -> HubRegistration {
        try HubRegistrationRules.stored(
            nhDocument: (row["nh_document"] as Data?).map { [UInt8]($0) },
            installation: (row["document"] as Data?).map { [UInt8]($0) }, etag: row["etag"],
            createdAt: row["created_at"], updatedAt: row["updated_at"], expired: row["expired"])
    }
}

extension RegistrationSQL {
    /// What a registration read selects (``HubRegistrationRules/stored(nhDocument:installation:etag:createdAt:updatedAt:expired:)``).
    static let hubRegistrationColumns =
        "r.nh_document, CASE WHEN r.nh_id IS NULL THEN r.document END AS document, r.etag, r.created_at, r.updated_at, r.expired"

    /// A page of a hub's NH registrations and installations (NH lists both) by NH id (an
    /// installation's: its installation id) after `after`: all, those with one handle (the handle
    /// index), or those with one tag (the tag's index entries).
    static func hubRegistrations(
        _ dialect: SQLStatement.Dialect, hub: String, handle: String?, tag: String?, after: String, limit: Int
    ) -> SQLStatement {
        var q = SQLStatement(dialect, "SELECT \(hubRegistrationColumns) FROM ")
        if let tag {
            q += "registration_tag t JOIN registration r ON r.id = t.registration_id WHERE t.tag = \(q.bind(tag)) AND"
        } else {
            q += "registration r WHERE"
        }
        q += " r.hub = \(q.bind(hub)) AND (r.nh_id IS NOT NULL OR r.installation_id IS NOT NULL)"
        q += " AND COALESCE(r.nh_id, r.installation_id) > \(q.bind(after))"
        if let handle { q += " AND r.handle = \(q.bind(handle))" }
        q += " ORDER BY COALESCE(r.nh_id, r.installation_id) LIMIT \(q.bind(Int64(limit)))"
        return q
    }
}
