import Foundation
public import GRDB
public import HeraldModel
public import HeraldProto
import HeraldRPC

/// Hubs, their shared access keys, and the rights Herald users hold on them, beside the accounts:
/// ``SQLiteHubStore`` or ``PostgresHubStore``.
///
/// Key secrets are stored as written: NH's signature is an HMAC keyed by the secret's own UTF-8
/// bytes, so the server needs the secret itself (as Azure does), not a hash of it. The database is
/// the service's own (a 0600 file owned by herald-auth's UID, or its own PostgreSQL schema).
public protocol HubStore: Sendable {
    nonisolated(nonsending) func createHub(_ name: String, maxInstallations: Int64) async throws -> Hub
    /// The stored name and immutable id of the hub `name` names, regardless of case (an exact
    /// spelling first: two hubs made before names were unique regardless of case stay reachable),
    /// or nil. Every call that takes a hub name from outside goes through it first.
    nonisolated(nonsending) func resolve(_ name: String) async throws -> HubIdentity?
    /// The hub with its keys' names and rights, secrets left out.
    nonisolated(nonsending) func hub(_ name: String) async throws -> Hub
    nonisolated(nonsending) func listHubs() async throws -> [Hub]
    nonisolated(nonsending) func setLimits(hub: String, maxInstallations: Int64) async throws -> Hub
    nonisolated(nonsending) func hubExists(_ name: String) async throws -> Bool
    nonisolated(nonsending) func deleteHub(_ name: String) async throws
    nonisolated(nonsending) func keys(of hub: String) async throws -> [HubKey]
    /// Creates the key with new secrets, or changes the rights of an existing one.
    nonisolated(nonsending) func setKey(hub: String, name: String, rights: HubRights) async throws -> HubKey
    /// A new random secret in place of the primary or the secondary one.
    nonisolated(nonsending) func rotateKey(hub: String, name: String, secondary: Bool) async throws -> HubKey
    nonisolated(nonsending) func revokeKey(hub: String, name: String) async throws
    /// The key with its secrets and its hub's installation limit, in one read, or nil.
    nonisolated(nonsending) func secrets(hub: String, name: String) async throws -> HubSecrets?
    /// Sets a user's rights on a hub; none removes the grant.
    nonisolated(nonsending) func grant(hub: String, user: String, rights: HubRights) async throws
    nonisolated(nonsending) func rights(hub: String, user: String) async throws -> HubRights
    /// Erase: every grant of `user` on every hub; returns how many.
    nonisolated(nonsending) func revokeGrants(of user: String) async throws -> Int64
    /// Export: every grant of `user`, by hub name.
    nonisolated(nonsending) func grants(of user: String) async throws -> [(hub: String, rights: HubRights)]
    /// Every hub, key and grant (ResetForTests); the default hub is made again.
    nonisolated(nonsending) func deleteEverything() async throws -> Int64
}

/// What verifying a SAS token needs of its key.
public struct HubSecrets: Sendable {
    public var rights: HubRights
    public var primary: String
    public var secondary: String
    public var maxInstallations: Int64
    /// The hub's immutable id (``HubIdentity/id``).
    public var hubID: String
}

/// A hub as stored: its name as created and its immutable id.
public struct HubIdentity: Sendable, Equatable {
    public var name: String
    public var id: String
    public init(name: String, id: String) {
        self.name = name
        self.id = id
    }
}

/// The rules every ``HubStore`` shares.
public enum HubRules {
    public static let listenKeyName = "DefaultListenSharedAccessSignature"
    public static let fullKeyName = "DefaultFullSharedAccessSignature"

    /// Checks a new hub's name and limit.
    static func validateNewHub(_ name: String, maxInstallations: Int64) throws {
        guard maxInstallations >= 0 else {
            throw ServiceError.invalidArgument("max_installations must not be negative")
        }
        guard Names.isValidHubName(name) else {
            throw ServiceError.invalidArgument("hub name must be \(Names.hubNameRule)")
        }
        guard !Names.reservedHubNames.contains(name.lowercased()) else {
            throw ServiceError.invalidArgument("hub name \(name) is reserved for the edge's own routes")
        }
    }

    static func validateKey(name: String, rights: HubRights) throws {
        guard (1...256).contains(name.utf8.count), isKeyNameByte(name) else {
            throw ServiceError.invalidArgument("key name must be 1 to 256 characters of a-z A-Z 0-9 . - _")
        }
        guard !rights.isEmpty else {
            throw ServiceError.invalidArgument("give at least one right: Listen, Send or Manage")
        }
    }

    /// A new hub's id: "default" for the hub default, else 64 random bits in hex after "h" (17
    /// characters, a valid hub name too, so registration's and dispatch's checks hold).
    static func newID(for name: String) -> String {
        if name == Names.defaultHub { return Names.defaultHub }
        var generator = SystemRandomNumberGenerator()
        let value = UInt64.random(in: .min ... .max, using: &generator)
        let hex = String(value, radix: 16)
        return "h" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    static func alreadyExists(_ name: String) -> ServiceError {
        ServiceError(.alreadyExists, "hub \(name) already exists (hub names are unique regardless of case)")
    }

    static func notFound(_ name: String) -> ServiceError { ServiceError.notFound("hub \(name) not found") }

    static let defaultHubUndeletable = ServiceError(
        .failedPrecondition, "the hub default serves the tutorial's routes and /v1; it cannot be deleted")

    /// 256 random bits in base64 (44 characters), the shape of Azure's keys.
    static func newSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
    }

    private static func isKeyNameByte(_ name: String) -> Bool {
        name.utf8.allSatisfy {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: ".")
                || $0 == UInt8(ascii: "-")
                || $0 == UInt8(ascii: "_")
        }
    }
}

extension HubStore {
    nonisolated(nonsending) public func createHub(_ name: String) async throws -> Hub {
        try await createHub(name, maxInstallations: 0)
    }
}

/// Hubs, keys and grants in herald-auth's SQLite file beside the accounts.
public final class SQLiteHubStore: HubStore {
    public static let listenKeyName = HubRules.listenKeyName
    public static let fullKeyName = HubRules.fullKeyName

    private let db: any DatabaseWriter
    private let now: @Sendable () -> Int64

    /// The database must have been migrated by ``AccountStore`` (which registers ``migrate(_:)``).
    public init(db: any DatabaseWriter, now: @escaping @Sendable () -> Int64 = unixMillis) throws {
        self.db = db
        self.now = now
        try ensureDefaultHub()
    }

    /// herald-auth's schema additions for hubs; registered in ``AccountStore/migrator``.
    static func migrate(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v2-hubs") { db in
            try db.execute(
                sql: """
                    CREATE TABLE hub (
                        name TEXT PRIMARY KEY NOT NULL,
                        created_at INTEGER NOT NULL
                    );
                    CREATE TABLE hub_key (
                        hub TEXT NOT NULL REFERENCES hub(name) ON DELETE CASCADE,
                        name TEXT NOT NULL,
                        rights INTEGER NOT NULL,
                        primary_key TEXT NOT NULL,
                        secondary_key TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY (hub, name)
                    ) WITHOUT ROWID;
                    CREATE TABLE hub_grant (
                        hub TEXT NOT NULL REFERENCES hub(name) ON DELETE CASCADE,
                        user TEXT NOT NULL,
                        rights INTEGER NOT NULL,
                        PRIMARY KEY (hub, user)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v3-hub-limits") { db in
            try db.execute(sql: "ALTER TABLE hub ADD COLUMN max_installations INTEGER NOT NULL DEFAULT 0")
        }
        // Tenancy by an immutable id: a hub made before keeps its name as its id (its devices and
        // sends are stored under that name), a new hub gets a random one. Names are found
        // regardless of case from now on (the index serves those lookups).
        migrator.registerMigration("v4-hub-id") { db in
            try db.execute(
                sql: """
                    ALTER TABLE hub ADD COLUMN id TEXT;
                    UPDATE hub SET id = name;
                    CREATE UNIQUE INDEX hub_id ON hub (id);
                    CREATE INDEX hub_name_nocase ON hub (name COLLATE NOCASE);
                    """)
        }
    }

    /// The hub `default` with NH's two keys, made once.
    private func ensureDefaultHub() throws {
        let exists = try db.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM hub WHERE name = ?", arguments: [Names.defaultHub])
        }
        if exists != true { _ = try? createHub(Names.defaultHub) }
    }

    // MARK: hubs

    public func createHub(_ name: String, maxInstallations: Int64 = 0) throws -> Hub {
        try HubRules.validateNewHub(name, maxInstallations: maxInstallations)
        let now = self.now()
        do {
            try db.write { db in
                guard try Self.resolve(name, in: db) == nil else { throw HubRules.alreadyExists(name) }
                try db.execute(
                    sql: "INSERT INTO hub (name, id, created_at, max_installations) VALUES (?, ?, ?, ?)",
                    arguments: [name, HubRules.newID(for: name), now, maxInstallations])
                try Self.insertKey(hub: name, name: Self.listenKeyName, rights: .listen, now: now, in: db)
                try Self.insertKey(hub: name, name: Self.fullKeyName, rights: .full, now: now, in: db)
            }
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY {
            throw HubRules.alreadyExists(name)
        }
        return try hub(name)
    }

    public func resolve(_ name: String) throws -> HubIdentity? {
        try db.read { db in try Self.resolve(name, in: db) }
    }

    private static func resolve(_ name: String, in db: Database) throws -> HubIdentity? {
        try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT name, id FROM hub WHERE name = ? COLLATE NOCASE ORDER BY name = ? DESC LIMIT 1"),
            arguments: [name, name]
        ).map { HubIdentity(name: $0[0], id: $0[1]) }
    }

    /// The hub with its keys' names and rights, secrets left out.
    public func hub(_ name: String) throws -> Hub {
        try db.read { db in
            guard let found = try Self.resolve(name, in: db),
                let row = try Row.fetchOne(
                    db, sql: "SELECT created_at, max_installations FROM hub WHERE name = ?", arguments: [found.name])
            else { throw HubRules.notFound(name) }
            return Hub(
                name: found.name, createdAtUnixMs: row["created_at"],
                keys: try Self.keys(of: found.name, secrets: false, in: db),
                maxInstallations: row["max_installations"], id: found.id)
        }
    }

    public func listHubs() throws -> [Hub] {
        let names = try db.read { db in try String.fetchAll(db, sql: "SELECT name FROM hub ORDER BY name") }
        return try names.map(hub)
    }

    public func setLimits(hub: String, maxInstallations: Int64) throws -> Hub {
        guard maxInstallations >= 0 else {
            throw ServiceError.invalidArgument("max_installations must not be negative")
        }
        try db.write { db in
            try db.execute(
                sql: "UPDATE hub SET max_installations = ? WHERE name = ?", arguments: [maxInstallations, hub])
            guard db.changesCount == 1 else { throw ServiceError.notFound("hub \(hub) not found") }
        }
        return try self.hub(hub)
    }

    public func hubExists(_ name: String) throws -> Bool {
        try db.read { db in try Bool.fetchOne(db, sql: "SELECT 1 FROM hub WHERE name = ?", arguments: [name]) ?? false }
    }

    public func deleteHub(_ name: String) throws {
        guard name != Names.defaultHub else { throw HubRules.defaultHubUndeletable }
        try db.write { db in
            try db.execute(sql: "DELETE FROM hub_key WHERE hub = ?", arguments: [name])
            try db.execute(sql: "DELETE FROM hub_grant WHERE hub = ?", arguments: [name])
            try db.execute(sql: "DELETE FROM hub WHERE name = ?", arguments: [name])
            guard db.changesCount == 1 else { throw ServiceError.notFound("hub \(name) not found") }
        }
    }

    // MARK: keys

    public func keys(of hub: String) throws -> [HubKey] {
        try db.read { db in
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM hub WHERE name = ?", arguments: [hub]) == true else {
                throw ServiceError.notFound("hub \(hub) not found")
            }
            return try Self.keys(of: hub, secrets: true, in: db)
        }
    }

    /// Creates the key with new secrets, or changes the rights of an existing one.
    public func setKey(hub: String, name: String, rights: HubRights) throws -> HubKey {
        try HubRules.validateKey(name: name, rights: rights)
        let now = self.now()
        try db.write { db in
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM hub WHERE name = ?", arguments: [hub]) == true else {
                throw ServiceError.notFound("hub \(hub) not found")
            }
            try db.execute(
                sql: "UPDATE hub_key SET rights = ? WHERE hub = ? AND name = ?",
                arguments: [rights.rawValue, hub, name])
            if db.changesCount == 0 { try Self.insertKey(hub: hub, name: name, rights: rights, now: now, in: db) }
        }
        return try key(hub: hub, name: name)
    }

    /// A new random secret in place of the primary or the secondary one.
    public func rotateKey(hub: String, name: String, secondary: Bool) throws -> HubKey {
        try db.write { db in
            try db.execute(
                sql: "UPDATE hub_key SET \(secondary ? "secondary_key" : "primary_key") = ? WHERE hub = ? AND name = ?",
                arguments: [HubRules.newSecret(), hub, name])
            guard db.changesCount == 1 else { throw ServiceError.notFound("key \(name) of hub \(hub) not found") }
        }
        return try key(hub: hub, name: name)
    }

    public func revokeKey(hub: String, name: String) throws {
        try db.write { db in
            try db.execute(sql: "DELETE FROM hub_key WHERE hub = ? AND name = ?", arguments: [hub, name])
            guard db.changesCount == 1 else { throw ServiceError.notFound("key \(name) of hub \(hub) not found") }
        }
    }

    /// The key with its secrets and its hub's installation limit, in one read, or nil.
    public func secrets(hub: String, name: String) throws -> HubSecrets? {
        try db.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT k.rights, k.primary_key, k.secondary_key, h.max_installations, h.id
                    FROM hub_key k JOIN hub h ON h.name = k.hub
                    WHERE k.hub = (SELECT name FROM hub WHERE name = ? COLLATE NOCASE ORDER BY name = ? DESC LIMIT 1) AND k.name = ?
                    """,
                arguments: [hub, hub, name]
            ).map {
                HubSecrets(
                    rights: HubRights(rawValue: $0["rights"]), primary: $0["primary_key"],
                    secondary: $0["secondary_key"],
                    maxInstallations: $0["max_installations"], hubID: $0["id"])
            }
        }
    }

    private func key(hub: String, name: String) throws -> HubKey {
        try db.read { db in
            guard let key = try Self.keys(of: hub, secrets: true, in: db).first(where: { $0.name == name }) else {
                throw ServiceError.notFound("key \(name) of hub \(hub) not found")
            }
            return key
        }
    }

    // MARK: grants to Herald users

    public func grant(hub: String, user: String, rights: HubRights) throws {
        try db.write { db in
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM hub WHERE name = ?", arguments: [hub]) == true else {
                throw ServiceError.notFound("hub \(hub) not found")
            }
            if rights.isEmpty {
                try db.execute(sql: "DELETE FROM hub_grant WHERE hub = ? AND user = ?", arguments: [hub, user])
            } else {
                try db.execute(
                    sql:
                        "INSERT INTO hub_grant (hub, user, rights) VALUES (?, ?, ?) ON CONFLICT (hub, user) DO UPDATE SET rights = excluded.rights",
                    arguments: [hub, user, rights.rawValue])
            }
        }
    }

    public func grants(of user: String) throws -> [(hub: String, rights: HubRights)] {
        try db.read { db in
            try Row.fetchAll(
                db, sql: "SELECT hub, rights FROM hub_grant WHERE user = ? ORDER BY hub", arguments: [user]
            )
            .map { ($0["hub"], HubRights(rawValue: $0["rights"])) }
        }
    }

    public func revokeGrants(of user: String) throws -> Int64 {
        try db.write { db in
            try db.execute(sql: "DELETE FROM hub_grant WHERE user = ?", arguments: [user])
            return Int64(db.changesCount)
        }
    }

    public func rights(hub: String, user: String) throws -> HubRights {
        // One SELECT is its own read transaction: `unsafeRead` spares GRDB's BEGIN/COMMIT.
        try db.unsafeRead { db in
            HubRights(
                rawValue: try Int.fetchOne(
                    db.cachedStatement(sql: "SELECT rights FROM hub_grant WHERE hub = ? AND user = ?"),
                    arguments: [hub, user]) ?? 0)
        }
    }

    /// Every hub, key and grant (ResetForTests); the default hub is made again.
    public func deleteEverything() throws -> Int64 {
        let deleted = try db.write { db in
            var deleted: Int64 = 0
            for table in ["hub_grant", "hub_key", "hub"] {
                try db.execute(sql: "DELETE FROM \(table)")
                deleted += Int64(db.changesCount)
            }
            return deleted
        }
        try ensureDefaultHub()
        return deleted
    }

    // MARK: helpers

    private static func keys(of hub: String, secrets: Bool, in db: Database) throws -> [HubKey] {
        try Row.fetchAll(
            db,
            sql: "SELECT name, rights, primary_key, secondary_key, created_at FROM hub_key WHERE hub = ? ORDER BY name",
            arguments: [hub]
        ).map { row in
            HubKey(
                name: row["name"], rights: HubRights(rawValue: row["rights"]).names,
                primaryKey: secrets ? row["primary_key"] : "", secondaryKey: secrets ? row["secondary_key"] : "",
                createdAtUnixMs: row["created_at"])
        }
    }

    private static func insertKey(hub: String, name: String, rights: HubRights, now: Int64, in db: Database) throws {
        try db.execute(
            sql:
                "INSERT INTO hub_key (hub, name, rights, primary_key, secondary_key, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            arguments: [hub, name, rights.rawValue, HubRules.newSecret(), HubRules.newSecret(), now])
    }
}
