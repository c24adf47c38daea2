import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import NotificationHubs

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

    /// Where a registrations feed page starts: after the entry with NH id `key` in row `row`.
    ///
    /// A registration and an installation may share an id (they are separate namespaces in NH),
    /// so an id alone does not say where a page ended: the continuation
    /// token is `<NH id>~<row id>`, and a page starts after that pair in (NH id, row id) order.
    /// `~` is in neither (NH ids are letters, digits, `.`, `-`, `_`; row ids are Herald's). A
    /// token without `~` (an NH id, as Herald wrote them before) starts after every entry with
    /// that id.
    public struct FeedCursor: Sendable, Equatable {
        public var key: String
        /// Empty for the first page, and in a token from before rows were named.
        public var row: String

        public static let start = FeedCursor(key: "", row: "")

        public init(key: String, row: String = "") {
            self.key = key
            self.row = row
        }

        /// A caller's continuation token; INVALID_ARGUMENT when it is not one Herald wrote.
        public init(token: String) throws {
            let refused = ServiceError.invalidArgument("the continuation token is not one this hub's listing gave")
            guard token.utf8.count <= maxIDLength + 1 + 64 else { throw refused }
            let parts = token.split(separator: "~", maxSplits: 2, omittingEmptySubsequences: false)
            switch parts.count {
            case 1:
                guard token.utf8.count <= maxIDLength else { throw refused }
                self.init(key: token)
            case 2:
                guard parts[0].utf8.count <= maxIDLength, !parts[1].isEmpty, parts[1].utf8.count <= 64 else {
                    throw refused
                }
                self.init(key: String(parts[0]), row: String(parts[1]))
            default:
                throw refused
            }
        }

        public var token: String { row.isEmpty ? key : key + "~" + row }
    }

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
        guard Platform.delivered.contains(r.platform) else {
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
            r.pushVariables = stored.pushVariables.sorted { $0.key < $1.key }.map {
                HubRegistrationField(name: $0.key, value: $0.value)
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

extension SQLRegistrationStore {
    /// Creates or replaces `registration` (validated) at its id, bumping its ETag.
    nonisolated(nonsending) public func putHubRegistration(
        hub: String, _ registration: HubRegistration, ifMatch: Int64, createOnly: Bool, maxRegistrations: Int64
    ) async throws -> (HubRegistration, created: Bool) {
        let now = self.now()
        return try await db.groupWrite { session in
            // The key replicas of the last release take too (an installation's, "nh" before the id).
            try await Self.lock(
                InstallationRows.lockKey(hub: hub, id: "nh\u{1}" + registration.registrationID), in: session)
            var r = registration
            let existing = try await session.queryFirst(
                "SELECT id, etag, created_at FROM registration WHERE hub = \(hub) AND nh_id = \(r.registrationID)")
            if existing != nil, createOnly {
                throw ServiceError(.alreadyExists, "registration \(r.registrationID) exists")
            }
            let storedETag: Int64? = try existing?[1]
            try HubRegistrationRules.checkETag(ifMatch, stored: storedETag)
            if existing == nil, maxRegistrations > 0 {
                let count: Int64 =
                    try await session.queryFirst(
                        "SELECT COUNT(*) FROM registration WHERE hub = \(hub) AND nh_id IS NOT NULL")?[0] ?? 0
                try RegistrationRules.checkRoom(count: count, limit: maxRegistrations, of: "registrations", hub: hub)
            }
            r.etag = (storedETag ?? 0) + 1
            r.createdAtUnixMs = try existing?[2] ?? now
            r.updatedAtUnixMs = now
            r.expired = false
            let stored: [UInt8] = try r.serializedBytes()
            let document = HubRegistrationRules.document(of: r)
            let templateName: String? = r.isTemplate ? r.templateName : nil
            let platform = Int64(r.platform.rawValue)
            let id: String = try existing?[0] ?? RegistrationSQL.newID(prefix: "n-")
            if existing != nil {
                try await session.execute(
                    """
                    UPDATE registration SET platform = \(platform), handle = \(r.handle), updated_at = \(now),
                        document = \(document), expired = 0, template_name = \(templateName), etag = \(r.etag),
                        nh_document = \(stored)
                    WHERE id = \(id)
                    """)
            } else {
                try await session.execute(
                    """
                    INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, document, expired,
                        template_name, nh_id, etag, nh_document)
                    VALUES (\(id), '', \(platform), \(r.handle), \(now), \(now), \(hub), \(document), 0, \(templateName),
                        \(r.registrationID), \(r.etag), \(stored))
                    """)
            }
            try await Self.setTags(r.tags, of: id, new: existing == nil, in: session)
            return (r, existing == nil)
        }
    }

    /// The registration with NH id `id`, else the installation with that id (NH lists
    /// installations among registrations).
    nonisolated(nonsending) public func hubRegistration(hub: String, id: String) async throws -> HubRegistration? {
        try await db.queryFirst(
            """
            SELECT \(raw: RegistrationSQL.hubRegistrationColumns) FROM registration r
            WHERE r.hub = \(hub) AND (r.nh_id = \(id) OR r.installation_id = \(id)) ORDER BY r.nh_id IS NULL LIMIT 1
            """
        ).map(Self.hubRegistration)
    }

    /// Deletes the registration with NH id `id`, else the installation with that id.
    nonisolated(nonsending) public func deleteHubRegistration(hub: String, id: String, ifMatch: Int64) async throws {
        try await db.groupWrite { session in
            let row = try await session.queryFirst(
                """
                SELECT id, CASE WHEN nh_id IS NULL THEN updated_at ELSE etag END FROM registration
                WHERE hub = \(hub) AND (nh_id = \(id) OR installation_id = \(id)) ORDER BY nh_id IS NULL LIMIT 1
                \(SQLFragment.forUpdate)
                """)
            guard let row else { throw ServiceError.notFound("Registration not found.") }
            try HubRegistrationRules.checkETag(ifMatch, stored: try row[1])
            let rowID: String = try row[0]
            try await session.execute("DELETE FROM registration WHERE id = \(rowID)")
        }
    }

    nonisolated(nonsending) public func listHubRegistrations(
        hub: String, handle: String?, tag: String?, after: HubRegistrationRules.FeedCursor, limit: Int
    ) async throws -> [(registration: HubRegistration, cursor: HubRegistrationRules.FeedCursor)] {
        try await db.query(
            RegistrationSQL.hubRegistrations(hub: hub, handle: handle, tag: tag, after: after, limit: limit)
        ) { row in
            (
                registration: try Self.hubRegistration(row),
                cursor: HubRegistrationRules.FeedCursor(key: try row[7], row: try row[6])
            )
        }
    }

    /// A row of ``RegistrationSQL/hubRegistrationColumns``.
    private static func hubRegistration(_ row: SQLRow) throws -> HubRegistration {
        try HubRegistrationRules.stored(
            nhDocument: try row[0], installation: try row[1], etag: try row[2], createdAt: try row[3],
            updatedAt: try row[4], expired: try row[5])
    }
}
