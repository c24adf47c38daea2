import Foundation
import GRDB
public import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldService

/// NH installations in the registration table (one row each, id "i-…", no owner), their NH JSON in
/// `document`, their tags plus the system tags `$InstallationId:{id}` and `$UserId:{id}` in
/// `registration_tag`. Every write commits before it answers, so a GET right after a PUT sees it
/// (NH processes installation writes in the background and may answer 404).
extension SQLiteRegistrations {
    /// Creates or replaces; keeps the row (and its id) of an existing installation. A changed push
    /// channel clears `pushChannelExpired`; the same channel keeps it.
    /// With `maxInstallations` above 0, creating one more in a hub that holds that many is
    /// RESOURCE_EXHAUSTED (counted over the (hub, installation_id) index, in the same transaction).
    @discardableResult
    public func putInstallation(hub: String, _ installation: Installation, maxInstallations: Int64 = 0) throws
        -> Installation
    {
        try db.write { db in try putInstallation(hub: hub, installation, maxInstallations: maxInstallations, in: db) }
    }

    /// ``putInstallation(hub:_:maxInstallations:)`` in the caller's transaction (a group commit's).
    func putInstallation(hub: String, _ installation: Installation, maxInstallations: Int64, in db: Database) throws
        -> Installation
    {
        try Self.write(hub: hub, installation, maxInstallations: maxInstallations, now: now(), in: db)
    }

    /// Reads, patches and writes back in one transaction.
    public func patchInstallation(
        hub: String, id: String, _ change: (inout Installation) throws -> Void
    ) throws -> Installation {
        try db.write { db in try patchInstallation(hub: hub, id: id, change, in: db) }
    }

    /// ``patchInstallation(hub:id:_:)`` in the caller's transaction.
    func patchInstallation(
        hub: String, id: String, _ change: (inout Installation) throws -> Void, in db: Database
    ) throws -> Installation {
        guard var installation = try Self.installation(hub: hub, id: id, in: db) else {
            throw ServiceError.notFound("Installation not found.")
        }
        try change(&installation)
        return try Self.write(hub: hub, installation, now: now(), in: db)
    }

    public func installation(hub: String, id: String) throws -> Installation? {
        try db.read { db in try Self.installation(hub: hub, id: id, in: db) }
    }

    /// Whether one was deleted.
    public func deleteInstallation(hub: String, id: String) throws -> Bool {
        try db.write { db in try deleteInstallation(hub: hub, id: id, in: db) }
    }

    /// ``deleteInstallation(hub:id:)`` in the caller's transaction.
    func deleteInstallation(hub: String, id: String, in db: Database) throws -> Bool {
        try db.execute(sql: "DELETE FROM registration WHERE hub = ? AND installation_id = ?", arguments: [hub, id])
        return db.changesCount > 0
    }

    /// A page of a hub's installations by installation id after `after`, filtered by a tag
    /// expression, user id and platform, evaluated in SQL.
    public func listInstallations(
        hub: String, expression: TagExpression?, userID: String?, platform: Platform, after: String, limit: Int
    ) throws -> [Installation] {
        let q = RegistrationSQL.installations(
            .sqlite, hub: hub, expression: expression, userID: userID, platform: platform, after: after, limit: limit)
        return try db.read { db in
            try Row.fetchAll(db, sql: q.text, arguments: q.sqliteArguments).map(Self.installation)
        }
    }

    /// A page of every device of a hub by registration id, for the NDJSON export: each line
    /// `{"kind":"installation","installation":{…}}` or `{"kind":"registration",…}`.
    public func exportPage(hub: String, after: String, limit: Int) throws -> (lines: [UInt8], last: String?, count: Int)
    {
        try db.read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT id, owner, platform, handle, updated_at, document, expired FROM registration
                    WHERE hub = ? AND id > ? AND platform != 0 AND template_name IS NULL ORDER BY id LIMIT ?
                    """,
                arguments: [hub, after, limit])
            var out: [UInt8] = []
            for row in rows {
                if row["document"] as Data? != nil {
                    out += try RegistrationSQL.exportLine(Self.installation(row))
                } else {
                    let id: String = row["id"]
                    let tags = try String.fetchAll(
                        db, sql: "SELECT tag FROM registration_tag WHERE registration_id = ? ORDER BY tag",
                        arguments: [id])
                    out += try RegistrationSQL.exportLine(
                        Registration(
                            registrationID: id, owner: row["owner"], platform: Platform(rawValue: row["platform"]),
                            handle: row["handle"],
                            tags: tags, updatedAtUnixMs: row["updated_at"]))
                }
            }
            return (out, rows.last?["id"], rows.count)
        }
    }

    /// Deletes every device of a hub, 10,000 per transaction; returns how many.
    public func deleteHub(_ hub: String) throws -> Int {
        try HeraldDatabase.deleteInBatches(
            db, batch: 10000,
            sql: "DELETE FROM registration WHERE id IN (SELECT id FROM registration WHERE hub = ? LIMIT 10000)",
            arguments: [hub])
    }

    // MARK: helpers

    /// Creates or replaces; with `maxInstallations` above 0, a new one is refused once the hub holds that many.
    private static func write(
        hub: String, _ installation: Installation, maxInstallations: Int64 = 0, now: Int64, in db: Database
    ) throws -> Installation {
        var installation = installation
        // Cached statements throughout: compiling them again for every write was a tenth of the
        // service's CPU in `herald-bench nh` (GRDB's authorizer runs on every compilation).
        let existing = try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT id, handle, expired FROM registration WHERE hub = ? AND installation_id = ?"),
            arguments: [hub, installation.installationID])
        if existing == nil, maxInstallations > 0 {
            let count =
                try Int64.fetchOne(
                    db.cachedStatement(
                        sql: "SELECT COUNT(*) FROM registration WHERE hub = ? AND installation_id IS NOT NULL"),
                    arguments: [hub]) ?? 0
            guard count < maxInstallations else {
                throw ServiceError(
                    .resourceExhausted,
                    "hub \(hub) holds its limit of \(maxInstallations) installations (herald hubs limits \(hub))")
            }
        }
        let id: String = existing?["id"] ?? RegistrationSQL.newID(prefix: "i-")
        // pushChannelExpired is read-only: it stays while the channel stays, and clears when it changes.
        installation.pushChannelExpired =
            existing.map { $0["handle"] == installation.pushChannel && $0["expired"] == true } ?? false
        installation.lastUpdate = now
        let document = Data(try installation.json())
        if existing == nil {
            try db.cachedStatement(
                sql: """
                    INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, installation_id, user_id, document, expired)
                    VALUES (?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """
            ).execute(
                arguments: [
                    id, installation.platform.rawValue, installation.pushChannel, now, now, hub,
                    installation.installationID,
                    installation.userID, document, installation.pushChannelExpired,
                ])
        } else {
            try db.cachedStatement(
                sql:
                    "UPDATE registration SET platform = ?, handle = ?, updated_at = ?, user_id = ?, document = ?, expired = ? WHERE id = ?"
            ).execute(
                arguments: [
                    installation.platform.rawValue, installation.pushChannel, now, installation.userID, document,
                    installation.pushChannelExpired, id,
                ])
            try db.cachedStatement(sql: "DELETE FROM registration_tag WHERE registration_id = ?").execute(arguments: [
                id
            ])
        }
        let insert = try db.cachedStatement(
            sql: "INSERT OR IGNORE INTO registration_tag (tag, registration_id) VALUES (?, ?)")
        for tag in installation.audienceTags { try insert.execute(arguments: [tag, id]) }
        try writeTemplates(
            of: installation, parentID: id, hub: hub, expired: installation.pushChannelExpired, now: now, in: db)
        return installation
    }

    /// Replaces an installation's template rows: one per template (NH's template registrations),
    /// with the installation's channel, and its tags plus the template's tags and name. Public for
    /// herald-bench, which seeds installations straight into the database.
    public static func writeTemplates(
        of installation: Installation, parentID: String, hub: String, expired: Bool, now: Int64, in db: Database
    ) throws {
        try db.cachedStatement(sql: "DELETE FROM registration WHERE parent_id = ?").execute(arguments: [parentID])
        guard !installation.templates.isEmpty else { return }
        let row = try db.cachedStatement(
            sql: """
                INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, document, expired, template_name, parent_id)
                VALUES (?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        let tag = try db.cachedStatement(
            sql: "INSERT OR IGNORE INTO registration_tag (tag, registration_id) VALUES (?, ?)")
        for (name, template) in installation.templates.sorted(by: { $0.key < $1.key }) {
            let id = RegistrationSQL.newID(prefix: "t-")
            try row.execute(arguments: [
                id, installation.platform.rawValue, installation.pushChannel, now, now, hub,
                Data(template.wireJSON.utf8), expired, name,
                parentID,
            ])
            for value in installation.audienceTags + template.tags { try tag.execute(arguments: [value, id]) }
        }
    }

    private static func installation(hub: String, id: String, in db: Database) throws -> Installation? {
        try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT document, expired, updated_at FROM registration WHERE hub = ? AND installation_id = ?"),
            arguments: [hub, id]
        ).map(installation)
    }

    private static func installation(_ row: Row) throws -> Installation {
        var installation = try Installation.stored([UInt8](row["document"] as Data))
        installation.pushChannelExpired = row["expired"]
        installation.lastUpdate = row["updated_at"]
        return installation
    }
}
