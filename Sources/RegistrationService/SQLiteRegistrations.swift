import Foundation
public import GRDB
public import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldService

/// Registrations in SQLite, synchronously (``SQLiteRegistrationStore`` is the ``RegistrationStore``
/// over it). Every query that names an id also names its owner, so another user's registration is
/// indistinguishable from a missing one.
///
/// Takes any GRDB `DatabaseWriter`: the service passes a WAL `DatabasePool` on its own file, tests
/// may pass an in-memory `DatabaseQueue`; herald-bench seeds devices through it.
public final class SQLiteRegistrations: Sendable {
    let db: any DatabaseWriter
    /// How long an id from POST api/register waits for its first PUT before it is gone (410), in ms.
    private let pendingTTL: Int64
    /// Unix epoch milliseconds; injected by tests that check expiry without waiting.
    let now: @Sendable () -> Int64

    public init(
        db: any DatabaseWriter, pendingTTL: Duration = .seconds(24 * 3600),
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) throws {
        self.db = db
        self.pendingTTL = pendingTTL.wholeMilliseconds
        self.now = now
        try HeraldDatabase.migrate(Self.migrator, db)
    }

    public static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE registration (
                        id TEXT PRIMARY KEY NOT NULL,
                        owner TEXT NOT NULL,
                        platform INTEGER NOT NULL DEFAULT 0,
                        handle TEXT NOT NULL DEFAULT '',
                        created_at INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL
                    );
                    CREATE INDEX registration_owner_handle ON registration(owner, handle);
                    CREATE TABLE registration_tag (
                        tag TEXT NOT NULL,
                        registration_id TEXT NOT NULL REFERENCES registration(id) ON DELETE CASCADE,
                        PRIMARY KEY (tag, registration_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX registration_tag_registration ON registration_tag(registration_id);
                    """)
        }
        migrator.registerMigration("v2-handle-index") { db in
            // RemoveHandle looks registrations up by handle alone.
            try db.execute(sql: "CREATE INDEX registration_handle ON registration(handle)")
        }
        migrator.registerMigration("v3-hubs-installations") { db in
            // Hubs (issue 15): every device belongs to one; the tutorial's to "default". An NH
            // installation is a registration row too ("i-…" id, no owner), so audiences see both
            // alike; its NH JSON is kept whole in `document` (templates, push variables).
            try db.execute(
                sql: """
                    ALTER TABLE registration ADD COLUMN hub TEXT NOT NULL DEFAULT 'default';
                    ALTER TABLE registration ADD COLUMN installation_id TEXT;
                    ALTER TABLE registration ADD COLUMN user_id TEXT;
                    ALTER TABLE registration ADD COLUMN document BLOB;
                    ALTER TABLE registration ADD COLUMN expired INTEGER NOT NULL DEFAULT 0;
                    CREATE UNIQUE INDEX registration_installation ON registration(hub, installation_id)
                        WHERE installation_id IS NOT NULL;
                    """)
        }
        migrator.registerMigration("v4-installation-templates") { db in
            // NH's template registrations (issue 16): each installation template is a row of its
            // own ("t-…", template_name set, parent_id its installation's row, its JSON in
            // `document`) carrying the installation's tags plus the template's tags and name, so a
            // template send's tag expression matches each template on its own, in SQL, as NH does.
            try db.execute(
                sql: """
                    ALTER TABLE registration ADD COLUMN template_name TEXT;
                    ALTER TABLE registration ADD COLUMN parent_id TEXT REFERENCES registration(id) ON DELETE CASCADE;
                    -- Not partial: SQLite looks children up through it when a row is deleted (the cascade).
                    CREATE INDEX registration_parent ON registration(parent_id);
                    """)
            // Installations stored before carry their templates in their document only.
            for row in try Row.fetchAll(
                db,
                sql: "SELECT id, hub, document, expired, updated_at FROM registration WHERE installation_id IS NOT NULL"
            ) {
                guard let installation = try? Installation.stored([UInt8](row["document"] as Data)),
                    !installation.templates.isEmpty
                else { continue }
                try Self.writeTemplates(
                    of: installation, parentID: row["id"], hub: row["hub"], expired: row["expired"],
                    now: row["updated_at"], in: db)
            }
        }
        registerHubRegistrations(&migrator)
        return migrator
    }

    /// Push-service feedback: deletes every registration of `platform` with `handle` not updated
    /// after `invalidSince` (Unix ms; 0: all), whoever owns it. Returns how many.
    /// Deletes every registration and its tags (ResetForTests).
    public func deleteEverything() throws -> Int64 {
        try TestMode.deleteAll(["registration_tag", "registration"], in: db)
    }

    /// Installations are kept and marked `pushChannelExpired` (NH's behaviour; sends skip them until
    /// the channel changes); tutorial registrations are deleted, so the app's next PUT gets 410.
    public func removeHandle(platform: Platform, handle: String, invalidSince: Int64) throws -> Int {
        try db.write { db in
            try db.execute(
                sql: """
                    UPDATE registration SET expired = 1
                    WHERE handle = ? AND platform = ? AND (? = 0 OR updated_at <= ?) AND installation_id IS NOT NULL AND expired = 0
                    """,
                arguments: [handle, platform.rawValue, invalidSince, invalidSince])
            let expired = db.changesCount
            // An installation's templates go quiet with it (counted once, with the installation).
            try db.execute(
                sql: """
                    UPDATE registration SET expired = 1
                    WHERE handle = ? AND platform = ? AND (? = 0 OR updated_at <= ?) AND parent_id IS NOT NULL AND expired = 0
                    """,
                arguments: [handle, platform.rawValue, invalidSince, invalidSince])
            try db.execute(
                sql: """
                    DELETE FROM registration WHERE handle = ? AND platform = ? AND (? = 0 OR updated_at <= ?)
                        AND installation_id IS NULL AND parent_id IS NULL
                    """,
                arguments: [handle, platform.rawValue, invalidSince, invalidSince])
            return expired + db.changesCount
        }
    }

    /// POST api/register: the owner's first registration for `handle` (its duplicates deleted), or a
    /// new id. In the caller's transaction (``SQLiteRegistrationStore`` batches these writes).
    func createID(owner: String, handle: String, in db: Database) throws -> String {
        if !handle.isEmpty {
            let ids = try String.fetchAll(
                db.cachedStatement(
                    sql: "SELECT id FROM registration WHERE owner = ? AND handle = ? ORDER BY created_at, rowid"),
                arguments: [owner, handle])
            if let first = ids.first {
                for duplicate in ids.dropFirst() {
                    try db.execute(sql: "DELETE FROM registration WHERE id = ?", arguments: [duplicate])
                }
                return first
            }
        }
        let id = RegistrationSQL.newID()
        let now = self.now()
        try db.cachedStatement(sql: "INSERT INTO registration (id, owner, created_at, updated_at) VALUES (?, ?, ?, ?)")
            .execute(arguments: [id, owner, now, now])
        return id
    }

    /// PUT api/register/{id}: replaces platform, handle and tags of a registration the owner holds.
    /// Tags must already be validated; the server's `username:` tag is added here. In the caller's
    /// transaction.
    func upsert(owner: String, id: String, platform: Platform, handle: String, tags: [String], in db: Database) throws
        -> Registration
    {
        let now = self.now()
        // A pending id (never PUT: platform 0) only within its TTL.
        try db.cachedStatement(
            sql: """
                UPDATE registration SET platform = ?, handle = ?, updated_at = ?
                WHERE id = ? AND owner = ? AND (platform != 0 OR created_at > ?)
                """
        ).execute(arguments: [platform.rawValue, handle, now, id, owner, now - pendingTTL])
        guard db.changesCount == 1 else { throw ServiceError.notFound("registration \(id) not found") }
        try db.cachedStatement(sql: "DELETE FROM registration_tag WHERE registration_id = ?").execute(arguments: [id])
        let allTags = tags + [RegistrationRules.userTag(owner)]
        let insert = try db.cachedStatement(sql: "INSERT INTO registration_tag (tag, registration_id) VALUES (?, ?)")
        for tag in allTags { try insert.execute(arguments: [tag, id]) }
        return Registration(
            registrationID: id, owner: owner, platform: platform, handle: handle, tags: allTags,
            updatedAtUnixMs: now)
    }

    /// Deletes ids allocated by POST that were never PUT within ``pendingTTL``; returns how many.
    public func purgePending() throws -> Int {
        try db.write { db in
            try db.execute(
                sql: "DELETE FROM registration WHERE platform = \(Platform.unspecified.rawValue) AND created_at <= ?",
                arguments: [now() - pendingTTL])
            return db.changesCount
        }
    }

    /// DELETE api/register/{id}, in the caller's transaction.
    func delete(owner: String, id: String, in db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM registration WHERE id = ? AND owner = ?").execute(arguments: [
            id, owner,
        ])
        guard db.changesCount == 1 else { throw ServiceError.notFound("registration \(id) not found") }
    }

    /// Every registration of `owner`, oldest first, with tags.
    public func list(owner: String) throws -> [Registration] {
        try db.read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT id, owner, platform, handle, updated_at FROM registration
                    WHERE owner = ? ORDER BY created_at, rowid
                    """,
                arguments: [owner])
            return try rows.map { row in
                var registration = Self.registration(row)
                registration.tags = try String.fetchAll(
                    db, sql: "SELECT tag FROM registration_tag WHERE registration_id = ? ORDER BY tag",
                    arguments: [registration.registrationID])
                return registration
            }
        }
    }

    /// One page of an audience (see ``RegistrationSQL/audience(_:driver:expression:platform:hub:templates:after:limit:)``).
    func audience(_ statement: SQLStatement, templates: Bool) throws -> [Registration] {
        try db.read { db in
            try Row.fetchAll(db, sql: statement.text, arguments: statement.sqliteArguments).map { row in
                var registration = Self.registration(row)
                if templates {
                    registration.templateName = row["template_name"]
                    registration.templateJson = String(decoding: row["document"] as Data, as: UTF8.self)
                }
                return registration
            }
        }
    }

    /// One page of ListDevices (see ``RegistrationSQL/devices``).
    func devices(_ statement: SQLStatement) throws -> [Registration] {
        try db.read { db in
            try Row.fetchAll(db, sql: statement.text, arguments: statement.sqliteArguments).map { row in
                var registration = Self.registration(row)
                registration.tags = (row[7] as String?).map { $0.split(separator: "\n").map(String.init) } ?? []
                registration.expired = (row["expired"] as Int64) != 0
                return registration
            }
        }
    }

    private static func registration(_ row: Row) -> Registration {
        Registration(
            registrationID: row["id"], owner: row["owner"], platform: Platform(rawValue: row["platform"]),
            handle: row["handle"], tags: [], updatedAtUnixMs: row["updated_at"], hub: row["hub"] ?? Names.defaultHub,
            installationID: row["installation_id"] ?? "")
    }

}
