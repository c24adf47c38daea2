import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldSQL
import HeraldService
import NotificationHubs

/// Registrations and NH installations: ``SQLRegistrationStore`` over whichever database holds them
/// (SQLite, embedded, one process; PostgreSQL, shared by replicas), or a test's fake. Every call
/// that names an id also names its owner (or hub), so another user's registration is
/// indistinguishable from a missing one.
public protocol RegistrationStore: Sendable {
    /// POST api/register: the owner's first registration for `handle` (its duplicates deleted), or a
    /// new id.
    nonisolated(nonsending) func createID(owner: String, handle: String) async throws -> String
    /// PUT api/register/{id}: replaces platform, handle and tags of a registration the owner holds.
    /// Tags must already be validated; the server's `username:` tag is added here.
    nonisolated(nonsending) func upsert(owner: String, id: String, platform: Platform, handle: String, tags: [String])
        async throws
        -> Registration
    /// DELETE api/register/{id}.
    nonisolated(nonsending) func delete(owner: String, id: String) async throws
    /// Every registration of `owner`, oldest first, with tags.
    nonisolated(nonsending) func list(owner: String) async throws -> [Registration]
    /// Push-service feedback: of the devices with `handle` on `platform` not updated after
    /// `invalidSince` (Unix ms; 0: all), installations are kept and marked `pushChannelExpired`
    /// (NH's behaviour; sends skip them until the channel changes) and tutorial and NH registrations
    /// are deleted (the tutorial app's next PUT gets 410). Returns how many.
    nonisolated(nonsending) func removeHandle(platform: Platform, handle: String, invalidSince: Int64) async throws
        -> Int
    /// Deletes ids allocated by POST that were never PUT within the pending TTL; returns how many.
    nonisolated(nonsending) func purgePending() async throws -> Int
    /// One page of an audience, by increasing id after `after`: `driver`'s index entries, or every
    /// device of the hub, filtered by `expression` (see ``RegistrationSQL``).
    nonisolated(nonsending) func audience(
        driver: String?, expression: TagExpression.Node?, platform: Platform, hub: String, templates: Bool,
        after: String, limit: Int
    ) async throws -> [Registration]

    /// Creates or replaces; keeps the row (and its id) of an existing installation. A changed push
    /// channel clears `pushChannelExpired`; the same channel keeps it. With `maxInstallations`
    /// above 0, creating one more in a hub that holds that many is RESOURCE_EXHAUSTED.
    @discardableResult
    nonisolated(nonsending) func putInstallation(hub: String, _ installation: Installation, maxInstallations: Int64)
        async throws
        -> Installation
    /// Reads, patches and writes back in one transaction.
    nonisolated(nonsending) func patchInstallation(
        hub: String, id: String, _ change: @escaping @Sendable (inout Installation) throws -> Void
    ) async throws -> Installation
    nonisolated(nonsending) func installation(hub: String, id: String) async throws -> Installation?
    /// Whether one was deleted.
    nonisolated(nonsending) func deleteInstallation(hub: String, id: String) async throws -> Bool
    /// A page of a hub's installations by installation id after `after`, filtered by a tag
    /// expression, user id and platform, evaluated in SQL.
    nonisolated(nonsending) func listInstallations(
        hub: String, expression: TagExpression?, userID: String?, platform: Platform, after: String, limit: Int
    ) async throws -> [Installation]
    /// NH registrations (``HubRegistrationRules``): creates or replaces `registration` (validated)
    /// at its id, bumping its ETag; `ifMatch` 0 matches anything, `createOnly` refuses an id in use,
    /// `maxRegistrations` above 0 bounds how many a hub holds. Returns it and whether it was created.
    nonisolated(nonsending) func putHubRegistration(
        hub: String, _ registration: HubRegistration, ifMatch: Int64, createOnly: Bool, maxRegistrations: Int64
    ) async throws -> (HubRegistration, created: Bool)
    nonisolated(nonsending) func hubRegistration(hub: String, id: String) async throws -> HubRegistration?
    /// NOT_FOUND when absent; FAILED_PRECONDITION when `ifMatch` (not 0) is not its ETag.
    nonisolated(nonsending) func deleteHubRegistration(hub: String, id: String, ifMatch: Int64) async throws
    /// A page by NH id and row after `after`: all of the hub's, or those with `handle`, or with
    /// `tag`; each entry with the cursor a page after it starts from.
    nonisolated(nonsending) func listHubRegistrations(
        hub: String, handle: String?, tag: String?, after: HubRegistrationRules.FeedCursor, limit: Int
    ) async throws -> [(registration: HubRegistration, cursor: HubRegistrationRules.FeedCursor)]
    /// A page of every device of a hub by registration id, as NDJSON export lines.
    nonisolated(nonsending) func exportPage(hub: String, after: String, limit: Int) async throws
        -> (lines: [UInt8], last: String?, count: Int)
    /// A page of a hub's devices for an operator (ListDevices; ``RegistrationSQL/devices``), with
    /// tags and `expired`.
    nonisolated(nonsending) func devices(
        hub: String, user: String?, expression: TagExpression?, platform: Platform, handlePrefix: String?,
        after: String, limit: Int
    ) async throws -> [Registration]
    /// Erase and export: a page of the user's devices after registration id `after`, lowest id
    /// first (``RegistrationErasure`` says which are the user's); `hub` empty: every hub.
    nonisolated(nonsending) func userDevices(user: String, hub: String, after: String, limit: Int) async throws
        -> [UserDevice]
    /// Export: the user's devices whole, by registration id after `after`.
    nonisolated(nonsending) func exportUserDevices(user: String, hub: String, after: String, limit: Int) async throws
        -> [UserDeviceRecord]
    /// Erase: deletes those of `ids` still the user's, with their tags and templates.
    nonisolated(nonsending) func eraseUserDevices(user: String, hub: String, ids: [String]) async throws -> Int64
    /// Deletes every device of a hub, in batches; returns how many.
    nonisolated(nonsending) func deleteHub(_ hub: String) async throws -> Int
    /// Deletes every registration and its tags (ResetForTests).
    nonisolated(nonsending) func deleteEverything() async throws -> Int64
}

extension RegistrationStore {
    /// One page of the devices carrying `tag`, by id after `after` (keyset paging over the (tag,
    /// registration_id) key). With `templates`, installation templates instead (name and JSON).
    nonisolated(nonsending) public func audience(
        tag: String, platform: Platform, hub: String = Names.defaultHub, templates: Bool = false, after: String,
        limit: Int
    ) async throws -> [Registration] {
        try await audience(
            driver: tag, expression: nil, platform: platform, hub: hub, templates: templates, after: after, limit: limit
        )
    }

    /// One page of every device (or every installation template) of a hub: a broadcast.
    nonisolated(nonsending) public func audience(
        broadcast hub: String, platform: Platform, templates: Bool = false, after: String, limit: Int
    ) async throws -> [Registration] {
        try await audience(
            driver: nil, expression: nil, platform: platform, hub: hub, templates: templates, after: after, limit: limit
        )
    }

    /// One page of the devices matching a tag expression, evaluated in SQL over the tag index,
    /// never by loading every device: a one-tag ``TagExpression/cover`` drives the page.
    nonisolated(nonsending) public func audience(
        expression: TagExpression, platform: Platform, hub: String = Names.defaultHub, templates: Bool = false,
        after: String,
        limit: Int
    ) async throws -> [Registration] {
        if case .tag(let tag) = expression.root {
            return try await audience(
                tag: tag, platform: platform, hub: hub, templates: templates, after: after, limit: limit)
        }
        let cover = expression.cover
        return try await audience(
            driver: cover?.count == 1 ? cover?.first : nil, expression: expression.root, platform: platform, hub: hub,
            templates: templates, after: after, limit: limit)
    }

    @discardableResult
    nonisolated(nonsending) public func putInstallation(hub: String, _ installation: Installation) async throws
        -> Installation
    {
        try await putInstallation(hub: hub, installation, maxInstallations: 0)
    }
}

/// The ``RegistrationStore`` over one ``SQLDatabase``: the same statements on SQLite and
/// PostgreSQL, the rules (``RegistrationRules``, ``HubRegistrationRules``, ``InstallationRows``)
/// outside it.
///
/// Writes that answer a device (the tutorial's POST, PUT and DELETE api/register; NH's installation
/// and registration writes) go through ``SQLDatabase/groupWrite(_:)``: on SQLite, concurrent ones
/// commit together. Where SQLite's single writer serialises two replicas' writes, a PostgreSQL
/// transaction takes an advisory lock on what it changes: the (owner, handle) of a POST, the (hub,
/// installation id) of a PUT or PATCH, the (hub, NH id) of a registration. A hub's installation
/// limit is counted in the transaction but not locked across installations, so replicas racing at
/// the limit may pass it by a few.
public final class SQLRegistrationStore: RegistrationStore {
    let db: any SQLDatabase
    /// How long an id from POST api/register waits for its first PUT before it is gone (410), in ms.
    private let pendingTTL: Int64
    /// Unix epoch milliseconds; injected by tests that check expiry without waiting.
    let now: @Sendable () -> Int64

    public init(
        db: any SQLDatabase, pendingTTL: Duration = .seconds(24 * 3600),
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) async throws {
        self.db = db
        self.pendingTTL = pendingTTL.wholeMilliseconds
        self.now = now
        try await db.migrate(RegistrationSchema.schema)
    }

    /// On PostgreSQL, holds `key` until the transaction ends, so replicas' writers of the same thing
    /// take turns; SQLite's one writer already does.
    static func lock(_ key: String, in session: any SQLSession) async throws {
        guard session.dialect == .postgres else { return }
        try await session.execute("SELECT pg_advisory_xact_lock(hashtext(\(key)))")
    }

    /// Sets row `id`'s tags to `tags`. A row just made gets them inserted; an existing row's are
    /// written by difference, so a write that keeps its tags (an app that PUTs its installation or
    /// registration at every launch) writes no tag row.
    static func setTags(_ tags: [String], of id: String, new: Bool, in session: any SQLSession) async throws {
        var stored = Set<String>()
        if !new {
            stored = Set(
                try await session.query("SELECT tag FROM registration_tag WHERE registration_id = \(id)").map {
                    try $0[0] as String
                })
            let gone = stored.subtracting(tags).sorted()
            if !gone.isEmpty {
                try await session.execute(
                    "DELETE FROM registration_tag WHERE registration_id = \(id) AND tag IN (\(list: gone))")
            }
        }
        if let insert = RegistrationSQL.insertTags(tags.filter { !stored.contains($0) }, of: id) {
            try await session.execute(insert)
        }
    }

    // MARK: tutorial registrations

    nonisolated(nonsending) public func createID(owner: String, handle: String) async throws -> String {
        let now = self.now()
        return try await db.groupWrite { session in
            if !handle.isEmpty {
                try await Self.lock("\(owner)\u{1}\(handle)", in: session)
                let ids: [String] = try await session.query(
                    """
                    SELECT id FROM registration WHERE owner = \(owner) AND handle = \(handle)
                    ORDER BY created_at, \(RegistrationSQL.insertionOrder)
                    """
                ).map { try $0[0] }
                if let first = ids.first {
                    if ids.count > 1 {
                        try await session.execute(
                            "DELETE FROM registration WHERE id IN (\(list: Array(ids.dropFirst())))")
                    }
                    return first
                }
            }
            let id = RegistrationSQL.newID()
            try await session.execute(
                "INSERT INTO registration (id, owner, created_at, updated_at) VALUES (\(id), \(owner), \(now), \(now))")
            return id
        }
    }

    nonisolated(nonsending) public func upsert(
        owner: String, id: String, platform: Platform, handle: String, tags: [String]
    ) async throws -> Registration {
        let now = self.now()
        let allTags = tags + [RegistrationRules.userTag(owner)]
        let cutoff = now - pendingTTL
        try await db.groupWrite { session in
            // A pending id (never PUT: platform 0) only within its TTL.
            let updated = try await session.execute(
                """
                UPDATE registration SET platform = \(Int64(platform.rawValue)), handle = \(handle), updated_at = \(now)
                WHERE id = \(id) AND owner = \(owner) AND (platform != 0 OR created_at > \(cutoff))
                """)
            guard updated == 1 else { throw ServiceError.notFound("registration \(id) not found") }
            try await Self.setTags(allTags, of: id, new: false, in: session)
        }
        return Registration(
            registrationID: id, owner: owner, platform: platform, handle: handle, tags: allTags, updatedAtUnixMs: now)
    }

    nonisolated(nonsending) public func delete(owner: String, id: String) async throws {
        let deleted = try await db.groupWrite { session in
            try await session.execute("DELETE FROM registration WHERE id = \(id) AND owner = \(owner)")
        }
        guard deleted == 1 else { throw ServiceError.notFound("registration \(id) not found") }
    }

    nonisolated(nonsending) public func list(owner: String) async throws -> [Registration] {
        try await db.query(
            """
            SELECT r.id, r.owner, r.platform, r.handle, r.updated_at, r.hub, r.installation_id, \(RegistrationSQL.tags(of: "r"))
            FROM registration r WHERE r.owner = \(owner) ORDER BY r.created_at, r.\(RegistrationSQL.insertionOrder)
            """
        ) { row in
            var registration = try Self.registration(row)
            registration.tags = RegistrationSQL.tagList(try row[7])
            return registration
        }
    }

    nonisolated(nonsending) public func removeHandle(platform: Platform, handle: String, invalidSince: Int64)
        async throws -> Int
    {
        let platform = Int64(platform.rawValue)
        let matches: SQLQuery =
            "handle = \(handle) AND platform = \(platform) AND (\(invalidSince) = 0 OR updated_at <= \(invalidSince))"
        return try await db.transaction { session in
            // Installations expire (their templates go quiet with them, counted once, with the
            // installation): sends skip them until the channel changes, as NH does. Tutorial and
            // NH registrations are deleted, so the app's next PUT gets 410.
            let expired = try await session.execute(
                "UPDATE registration SET expired = 1 WHERE \(matches) AND installation_id IS NOT NULL AND expired = 0")
            try await session.execute(
                "UPDATE registration SET expired = 1 WHERE \(matches) AND parent_id IS NOT NULL AND expired = 0")
            let deleted = try await session.execute(
                "DELETE FROM registration WHERE \(matches) AND installation_id IS NULL AND parent_id IS NULL")
            return expired + deleted
        }
    }

    nonisolated(nonsending) public func purgePending() async throws -> Int {
        try await db.execute(
            "DELETE FROM registration WHERE platform = \(Int64(Platform.unspecified.rawValue)) AND created_at <= \(now() - pendingTTL)"
        )
    }

    nonisolated(nonsending) public func audience(
        driver: String?, expression: TagExpression.Node?, platform: Platform, hub: String, templates: Bool,
        after: String, limit: Int
    ) async throws -> [Registration] {
        // A page's rows share a few templates (one per locale, say): each distinct one is parsed once.
        var parsed: [String: InstallationTemplate] = [:]
        return try await db.query(
            RegistrationSQL.audience(
                driver: driver, expression: expression, platform: platform, hub: hub, templates: templates,
                after: after, limit: limit)
        ) { row in
            var registration = try Self.registration(row)
            if templates {
                let json: String = try row[8] ?? ""
                var template: InstallationTemplate
                if let known = parsed[json] {
                    template = known
                } else {
                    template = Installation.Template.message(wireJSON: json)
                    parsed[json] = template
                }
                template.name = try row[7] ?? ""
                registration.template = template
            }
            return registration
        }
    }

    nonisolated(nonsending) public func devices(
        hub: String, user: String?, expression: TagExpression?, platform: Platform, handlePrefix: String?,
        after: String, limit: Int
    ) async throws -> [Registration] {
        try await db.query(
            RegistrationSQL.devices(
                db.dialect, hub: hub, user: user, expression: expression, platform: platform,
                handlePrefix: handlePrefix, after: after, limit: limit)
        ) { row in
            var registration = Registration(
                registrationID: try row[0], owner: try row[1], platform: Platform(rawValue: try row[2]),
                handle: try row[3], tags: RegistrationSQL.tagList(try row[7]), updatedAtUnixMs: try row[4],
                hub: hub, installationID: try row[5] ?? "")
            registration.expired = try row[6]
            return registration
        }
    }

    /// A row of `SELECT id, owner, platform, handle, updated_at, hub, installation_id …`.
    static func registration(_ row: SQLRow) throws -> Registration {
        Registration(
            registrationID: try row[0], owner: try row[1], platform: Platform(rawValue: try row[2]),
            handle: try row[3], tags: [], updatedAtUnixMs: try row[4], hub: try row[5],
            installationID: try row[6] ?? "")
    }

    nonisolated(nonsending) public func exportPage(hub: String, after: String, limit: Int) async throws
        -> (lines: [UInt8], last: String?, count: Int)
    {
        let rows = try await db.query(
            """
            SELECT r.id, r.owner, r.platform, r.handle, r.updated_at, r.document, r.expired,
                   CASE WHEN r.document IS NULL THEN \(RegistrationSQL.tags(of: "r")) END
            FROM registration r
            WHERE r.hub = \(hub) AND r.id > \(after) AND r.platform != 0 AND r.template_name IS NULL
            ORDER BY r.id LIMIT \(Int64(limit))
            """)
        // An installation's line is its document; only a registration's reads its tags.
        var out: [UInt8] = []
        var last: String?
        for row in rows {
            let id: String = try row[0]
            if let document: [UInt8] = try row[5] {
                var installation = try Installation.stored(document)
                installation.pushChannelExpired = try row[6]
                installation.lastUpdate = try row[4]
                out += try RegistrationSQL.exportLine(installation)
            } else {
                out += try RegistrationSQL.exportLine(
                    Registration(
                        registrationID: id, owner: try row[1], platform: Platform(rawValue: try row[2]),
                        handle: try row[3], tags: RegistrationSQL.tagList(try row[7]), updatedAtUnixMs: try row[4]))
            }
            last = id
        }
        return (out, last, rows.count)
    }

    nonisolated(nonsending) public func deleteHub(_ hub: String) async throws -> Int {
        try await db.deleteInBatches(batch: 10000) {
            """
            DELETE FROM registration WHERE id IN (
                SELECT id FROM registration WHERE hub = \(hub) LIMIT 10000 \(SQLFragment.skipLocked))
            """
        }
    }

    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 {
        try await db.deleteAll(["registration_tag", "registration"])
    }
}
