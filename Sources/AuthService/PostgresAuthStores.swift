import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldService
import NIOCore
import PostgresNIO

/// herald-auth's schema on PostgreSQL: accounts, tokens, hubs, keys, grants and lockouts, for auth
/// replicas that share one database. ``PostgresAccountStore`` migrates it; the hub store and the
/// lockout ledger use the same ``HeraldPostgres``.
public enum PostgresAuthSchema {
    /// The schema's history; names are never changed once released. (`user` is a reserved word in
    /// PostgreSQL: the tables say `account` and `user_name`.)
    public static let migrations: [PostgresMigration] = [
        .heartbeat,
        PostgresMigration(
            "auth-v1",
            [
                """
                CREATE TABLE account (
                    name TEXT PRIMARY KEY, password_hash TEXT NOT NULL, created_at BIGINT NOT NULL,
                    password_changed_at BIGINT NOT NULL)
                """,
                """
                CREATE TABLE token (
                    hash BYTEA PRIMARY KEY, user_name TEXT NOT NULL, created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL,
                    revoked_at BIGINT)
                """,
                "CREATE INDEX token_user ON token (user_name)",
                "CREATE INDEX token_expires ON token (expires_at)",
                "CREATE TABLE hub (name TEXT PRIMARY KEY, created_at BIGINT NOT NULL, max_installations BIGINT NOT NULL DEFAULT 0)",
                """
                CREATE TABLE hub_key (
                    hub TEXT NOT NULL REFERENCES hub(name) ON DELETE CASCADE, name TEXT NOT NULL, rights INTEGER NOT NULL,
                    primary_key TEXT NOT NULL, secondary_key TEXT NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (hub, name))
                """,
                """
                CREATE TABLE hub_grant (
                    hub TEXT NOT NULL REFERENCES hub(name) ON DELETE CASCADE, user_name TEXT NOT NULL, rights INTEGER NOT NULL,
                    PRIMARY KEY (hub, user_name))
                """,
                // Failed logins and SAS signatures per name, shared by every auth replica.
                """
                CREATE TABLE lockout (
                    name TEXT PRIMARY KEY, failures INTEGER NOT NULL, last_failure BIGINT NOT NULL, locked_until BIGINT NOT NULL)
                """,
                "CREATE INDEX lockout_last_failure ON lockout (last_failure)",
            ]),
        // Tenancy by an immutable id (as SQLite's v4-hub-id): older hubs keep their name as id.
        PostgresMigration(
            "auth-v2-hub-id",
            [
                "ALTER TABLE hub ADD COLUMN id TEXT",
                "UPDATE hub SET id = name",
                "ALTER TABLE hub ALTER COLUMN id SET NOT NULL",
                "CREATE UNIQUE INDEX hub_id ON hub (id)",
                "CREATE INDEX hub_name_lower ON hub (lower(name))",
            ]),
    ]
}

/// Accounts and tokens in PostgreSQL. Token revocation is a row update every replica reads at the
/// next request, so it holds everywhere at once.
public final class PostgresAccountStore: AccountStore {
    private let db: HeraldPostgres
    private let now: @Sendable () -> Int64
    public var isShared: Bool { true }

    public init(db: HeraldPostgres, now: @escaping @Sendable () -> Int64 = unixMillis) async throws {
        self.db = db
        self.now = now
        try await db.migrate(PostgresAuthSchema.migrations)
    }

    public func createUser(_ name: String, passwordHash: String) async throws -> User {
        let now = self.now()
        let inserted = try await db.rows(
            """
            INSERT INTO account (name, password_hash, created_at, password_changed_at) VALUES (\(name), \(passwordHash), \(now), \(now))
            ON CONFLICT (name) DO NOTHING RETURNING name
            """)
        guard !inserted.isEmpty else { throw ServiceError(.alreadyExists, "user \(name) already exists") }
        return User(name: name, createdAtUnixMs: now, passwordChangedAtUnixMs: now)
    }

    public func passwordHash(of name: String) async throws -> String? {
        try await db.execute(PasswordHash(name: name)).first
    }

    public func setPasswordHash(_ name: String, _ hash: String, revokeTokens: Bool) async throws -> User {
        let now = self.now()
        return try await db.transaction { connection in
            let rows = try await connection.query(
                "UPDATE account SET password_hash = \(hash), password_changed_at = \(now) WHERE name = \(name) RETURNING created_at",
                logger: db.logger
            ).collect()
            guard let created = try rows.first?.decode(Int64.self) else {
                throw ServiceError.notFound("user \(name) not found")
            }
            if revokeTokens {
                try await connection.query(
                    "UPDATE token SET revoked_at = \(now) WHERE user_name = \(name) AND revoked_at IS NULL AND expires_at > \(now)",
                    logger: db.logger)
            }
            return User(name: name, createdAtUnixMs: created, passwordChangedAtUnixMs: now)
        }
    }

    public func deleteUser(_ name: String) async throws {
        try await db.transaction { connection in
            let rows = try await connection.query(
                "DELETE FROM account WHERE name = \(name) RETURNING name", logger: db.logger
            ).collect()
            guard !rows.isEmpty else { throw ServiceError.notFound("user \(name) not found") }
            try await connection.query("DELETE FROM token WHERE user_name = \(name)", logger: db.logger)
        }
    }

    public func eraseUser(_ name: String) async throws -> Int64 {
        try await db.transaction { connection in
            let accounts = try await connection.query(
                "DELETE FROM account WHERE name = \(name) RETURNING name", logger: db.logger
            ).collect().count
            let tokens = try await connection.query(
                "DELETE FROM token WHERE user_name = \(name) RETURNING user_name", logger: db.logger
            ).collect().count
            return Int64(accounts + tokens)
        }
    }

    public func exportUser(_ name: String) async throws -> (user: User?, liveTokens: Int64) {
        let now = self.now()
        let user = try await db.rows(
            "SELECT created_at, password_changed_at FROM account WHERE name = \(name)"
        ).first.map { row in
            let (created, changed) = try row.decode((Int64, Int64).self)
            return User(name: name, createdAtUnixMs: created, passwordChangedAtUnixMs: changed)
        }
        let live =
            try await db.rows(
                "SELECT COUNT(*) FROM token WHERE user_name = \(name) AND revoked_at IS NULL AND expires_at > \(now)"
            ).first?.decode(Int64.self) ?? 0
        return (user, live)
    }

    public func deleteEverything() async throws -> Int64 {
        try await db.deleteAll(["token", "account", "lockout"])
    }

    public func listUsers() async throws -> [User] {
        try await db.rows("SELECT name, created_at, password_changed_at FROM account ORDER BY name").map { row in
            let (name, created, changed) = try row.decode((String, Int64, Int64).self)
            return User(name: name, createdAtUnixMs: created, passwordChangedAtUnixMs: changed)
        }
    }

    public func userExists(_ name: String) async throws -> Bool {
        try await !db.rows("SELECT 1 FROM account WHERE name = \(name)").isEmpty
    }

    public func insertToken(hash: Data, user: String, expiresAt: Int64) async throws {
        let now = self.now()
        try await db.query(
            "INSERT INTO token (hash, user_name, created_at, expires_at) VALUES (\(ByteBuffer(data: hash)), \(user), \(now), \(expiresAt))"
        )
    }

    public func tokenUser(hash: Data) async throws -> (user: String, expiresAt: Int64)? {
        try await db.execute(TokenUser(hash: ByteBuffer(data: hash), now: now())).first.map {
            (user: $0.0, expiresAt: $0.1)
        }
    }

    public func revokeToken(hash: Data) async throws -> Int64 {
        let now = self.now()
        return Int64(
            try await db.rows(
                """
                UPDATE token SET revoked_at = \(now) WHERE hash = \(ByteBuffer(data: hash)) AND revoked_at IS NULL AND expires_at > \(now)
                RETURNING 1
                """
            ).count)
    }

    public func revokeTokens(of user: String) async throws -> Int64 {
        let now = self.now()
        return Int64(
            try await db.rows(
                "UPDATE token SET revoked_at = \(now) WHERE user_name = \(user) AND revoked_at IS NULL AND expires_at > \(now) RETURNING 1"
            ).count)
    }

    public func purgeTokens(grace: Int64) async throws -> Int {
        let cutoff = now() - grace
        return try await db.rows("DELETE FROM token WHERE expires_at < \(cutoff) OR revoked_at < \(cutoff) RETURNING 1")
            .count
    }
}

/// Hubs, keys and grants in PostgreSQL; the schema is migrated by ``PostgresAccountStore``.
public final class PostgresHubStore: HubStore {
    private let db: HeraldPostgres
    private let now: @Sendable () -> Int64

    public init(db: HeraldPostgres, now: @escaping @Sendable () -> Int64 = unixMillis) async throws {
        self.db = db
        self.now = now
        try await ensureDefaultHub()
    }

    /// The hub `default` with NH's two keys, made once even when replicas start together.
    private func ensureDefaultHub() async throws {
        _ = try await insertHub(Names.defaultHub, maxInstallations: 0)
    }

    /// Whether the hub was new (then it got its two keys in the same transaction).
    private func insertHub(_ name: String, maxInstallations: Int64) async throws -> Bool {
        let now = self.now()
        return try await db.transaction { connection in
            let id = HubRules.newID(for: name)
            let rows = try await connection.query(
                """
                INSERT INTO hub (name, id, created_at, max_installations)
                SELECT \(name), \(id), \(now), \(maxInstallations) WHERE NOT EXISTS (SELECT 1 FROM hub WHERE lower(name) = lower(\(name)))
                ON CONFLICT (name) DO NOTHING RETURNING name
                """, logger: db.logger
            ).collect()
            guard !rows.isEmpty else { return false }
            try await Self.insertKey(
                hub: name, name: HubRules.listenKeyName, rights: .listen, now: now, on: connection, logger: db.logger)
            try await Self.insertKey(
                hub: name, name: HubRules.fullKeyName, rights: .full, now: now, on: connection, logger: db.logger)
            return true
        }
    }

    public func createHub(_ name: String, maxInstallations: Int64) async throws -> Hub {
        try HubRules.validateNewHub(name, maxInstallations: maxInstallations)
        guard try await insertHub(name, maxInstallations: maxInstallations) else { throw HubRules.alreadyExists(name) }
        return try await hub(name)
    }

    public func resolve(_ name: String) async throws -> HubIdentity? {
        try await db.rows(
            "SELECT name, id FROM hub WHERE lower(name) = lower(\(name)) ORDER BY name = \(name) DESC LIMIT 1"
        ).first.map { row in
            let (name, id) = try row.decode((String, String).self)
            return HubIdentity(name: name, id: id)
        }
    }

    public func hub(_ name: String) async throws -> Hub {
        guard let found = try await resolve(name),
            let row = try await db.rows("SELECT created_at, max_installations FROM hub WHERE name = \(found.name)")
                .first
        else { throw HubRules.notFound(name) }
        let (created, maxInstallations) = try row.decode((Int64, Int64).self)
        return Hub(
            name: found.name, createdAtUnixMs: created, keys: try await keys(of: found.name, secrets: false),
            maxInstallations: maxInstallations, id: found.id)
    }

    public func listHubs() async throws -> [Hub] {
        var hubs: [Hub] = []
        for row in try await db.rows("SELECT name FROM hub ORDER BY name") {
            hubs.append(try await hub(try row.decode(String.self)))
        }
        return hubs
    }

    public func setLimits(hub: String, maxInstallations: Int64) async throws -> Hub {
        guard maxInstallations >= 0 else {
            throw ServiceError.invalidArgument("max_installations must not be negative")
        }
        let rows = try await db.rows(
            "UPDATE hub SET max_installations = \(maxInstallations) WHERE name = \(hub) RETURNING name")
        guard !rows.isEmpty else { throw ServiceError.notFound("hub \(hub) not found") }
        return try await self.hub(hub)
    }

    public func hubExists(_ name: String) async throws -> Bool {
        try await !db.rows("SELECT 1 FROM hub WHERE name = \(name)").isEmpty
    }

    public func deleteHub(_ name: String) async throws {
        guard name != Names.defaultHub else { throw HubRules.defaultHubUndeletable }
        // Keys and grants go with it (ON DELETE CASCADE).
        guard try await !db.rows("DELETE FROM hub WHERE name = \(name) RETURNING name").isEmpty else {
            throw ServiceError.notFound("hub \(name) not found")
        }
    }

    public func keys(of hub: String) async throws -> [HubKey] {
        guard try await hubExists(hub) else { throw ServiceError.notFound("hub \(hub) not found") }
        return try await keys(of: hub, secrets: true)
    }

    public func setKey(hub: String, name: String, rights: HubRights) async throws -> HubKey {
        try HubRules.validateKey(name: name, rights: rights)
        let now = self.now()
        let rightsValue = Int32(rights.rawValue)
        try await db.transaction { connection in
            guard
                try await !connection.query("SELECT 1 FROM hub WHERE name = \(hub) FOR SHARE", logger: db.logger)
                    .collect().isEmpty
            else {
                throw ServiceError.notFound("hub \(hub) not found")
            }
            let updated = try await connection.query(
                "UPDATE hub_key SET rights = \(rightsValue) WHERE hub = \(hub) AND name = \(name) RETURNING name",
                logger: db.logger
            ).collect()
            if updated.isEmpty {
                try await Self.insertKey(
                    hub: hub, name: name, rights: rights, now: now, on: connection, logger: db.logger)
            }
        }
        return try await key(hub: hub, name: name)
    }

    public func rotateKey(hub: String, name: String, secondary: Bool) async throws -> HubKey {
        let column = secondary ? "secondary_key" : "primary_key"
        let rows = try await db.rows(
            "UPDATE hub_key SET \(unescaped: column) = \(HubRules.newSecret()) WHERE hub = \(hub) AND name = \(name) RETURNING name"
        )
        guard !rows.isEmpty else { throw ServiceError.notFound("key \(name) of hub \(hub) not found") }
        return try await key(hub: hub, name: name)
    }

    public func revokeKey(hub: String, name: String) async throws {
        guard try await !db.rows("DELETE FROM hub_key WHERE hub = \(hub) AND name = \(name) RETURNING name").isEmpty
        else {
            throw ServiceError.notFound("key \(name) of hub \(hub) not found")
        }
    }

    public func secrets(hub: String, name: String) async throws -> HubSecrets? {
        try await db.rows(
            """
            SELECT k.rights, k.primary_key, k.secondary_key, h.max_installations, h.id
            FROM hub_key k JOIN hub h ON h.name = k.hub
            WHERE k.hub = (SELECT name FROM hub WHERE lower(name) = lower(\(hub)) ORDER BY name = \(hub) DESC LIMIT 1)
            AND k.name = \(name)
            """
        ).first.map { row in
            let (rights, primary, secondary, maxInstallations, id) = try row.decode(
                (Int32, String, String, Int64, String).self)
            return HubSecrets(
                rights: HubRights(rawValue: Int(rights)), primary: primary, secondary: secondary,
                maxInstallations: maxInstallations,
                hubID: id)
        }
    }

    public func grants(of user: String) async throws -> [(hub: String, rights: HubRights)] {
        try await db.rows("SELECT hub, rights FROM hub_grant WHERE user_name = \(user) ORDER BY hub").map { row in
            let (hub, rights) = try row.decode((String, Int32).self)
            return (hub, HubRights(rawValue: Int(rights)))
        }
    }

    public func revokeGrants(of user: String) async throws -> Int64 {
        Int64(try await db.rows("DELETE FROM hub_grant WHERE user_name = \(user) RETURNING hub").count)
    }

    public func grant(hub: String, user: String, rights: HubRights) async throws {
        guard try await hubExists(hub) else { throw ServiceError.notFound("hub \(hub) not found") }
        if rights.isEmpty {
            try await db.query("DELETE FROM hub_grant WHERE hub = \(hub) AND user_name = \(user)")
        } else {
            let value = Int32(rights.rawValue)
            try await db.query(
                """
                INSERT INTO hub_grant (hub, user_name, rights) VALUES (\(hub), \(user), \(value))
                ON CONFLICT (hub, user_name) DO UPDATE SET rights = excluded.rights
                """)
        }
    }

    public func rights(hub: String, user: String) async throws -> HubRights {
        let value = try await db.execute(GrantedRights(hub: hub, user: user)).first
        return HubRights(rawValue: Int(value ?? 0))
    }

    public func deleteEverything() async throws -> Int64 {
        let deleted = try await db.deleteAll(["hub_grant", "hub_key", "hub"])
        try await ensureDefaultHub()
        return deleted
    }

    // MARK: helpers

    private func key(hub: String, name: String) async throws -> HubKey {
        guard let key = try await keys(of: hub, secrets: true).first(where: { $0.name == name }) else {
            throw ServiceError.notFound("key \(name) of hub \(hub) not found")
        }
        return key
    }

    private func keys(of hub: String, secrets: Bool) async throws -> [HubKey] {
        try await db.rows(
            "SELECT name, rights, primary_key, secondary_key, created_at FROM hub_key WHERE hub = \(hub) ORDER BY name"
        ).map { row in
            let (name, rights, primary, secondary, created) = try row.decode(
                (String, Int32, String, String, Int64).self)
            return HubKey(
                name: name, rights: HubRights(rawValue: Int(rights)).names, primaryKey: secrets ? primary : "",
                secondaryKey: secrets ? secondary : "", createdAtUnixMs: created)
        }
    }

    private static func insertKey(
        hub: String, name: String, rights: HubRights, now: Int64, on connection: PostgresConnection, logger: Logger
    ) async throws {
        let value = Int32(rights.rawValue)
        try await connection.query(
            """
            INSERT INTO hub_key (hub, name, rights, primary_key, secondary_key, created_at)
            VALUES (\(hub), \(name), \(value), \(HubRules.newSecret()), \(HubRules.newSecret()), \(now))
            """, logger: logger)
    }
}

/// Failed logins and signatures counted in PostgreSQL, so that failures spread over auth replicas
/// add up and a lockout holds on every replica.
public final class PostgresLockoutLedger: LockoutLedger {
    private let db: HeraldPostgres

    /// The schema must have been migrated (``PostgresAccountStore``).
    public init(db: HeraldPostgres) {
        self.db = db
    }

    public func lockedUntil(_ name: String) async throws -> Int64 {
        try await db.rows("SELECT locked_until FROM lockout WHERE name = \(name)").first?.decode(Int64.self) ?? 0
    }

    public func recordFailure(_ name: String, now: Int64, policy: LockoutPolicy) async throws {
        try await db.transaction { connection in
            // The row exists first, so that two replicas' first failures queue on its lock.
            try await connection.query(
                "INSERT INTO lockout (name, failures, last_failure, locked_until) VALUES (\(name), 0, \(now), 0) ON CONFLICT DO NOTHING",
                logger: db.logger)
            let row = try await connection.query(
                "SELECT failures, last_failure, locked_until FROM lockout WHERE name = \(name) FOR UPDATE",
                logger: db.logger
            ).collect().first
            guard let (failures, lastFailure, lockedUntil) = try row?.decode((Int32, Int64, Int64).self) else { return }
            let count = (now - lastFailure > policy.window ? 0 : Int(failures)) + 1
            let until = max(lockedUntil, policy.lockedUntil(failures: count, now: now))
            let countValue = Int32(clamping: count)
            try await connection.query(
                "UPDATE lockout SET failures = \(countValue), last_failure = \(now), locked_until = \(until) WHERE name = \(name)",
                logger: db.logger)
        }
    }

    public func clear(_ name: String) async throws {
        try await db.query("DELETE FROM lockout WHERE name = \(name)")
    }

    public func clearAll() async throws {
        try await db.query("DELETE FROM lockout")
    }

    /// Deletes rows that lock nothing and whose failures are forgotten; returns how many.
    public func purge(now: Int64, window: Int64) async throws -> Int {
        try await db.rows(
            "DELETE FROM lockout WHERE locked_until < \(now) AND last_failure < \(now - window) RETURNING 1"
        ).count
    }
}

// The reads every authenticated request makes, prepared once per connection.

/// An account's password hash.
struct PasswordHash: PostgresPreparedStatement {
    static let sql = "SELECT password_hash FROM account WHERE name = $1"
    typealias Row = String
    var name: String

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(name)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(String.self) }
}

/// The user of a live token.
struct TokenUser: PostgresPreparedStatement {
    static let sql =
        "SELECT user_name, expires_at FROM token WHERE hash = $1 AND revoked_at IS NULL AND expires_at > $2"
    typealias Row = (String, Int64)
    var hash: ByteBuffer
    var now: Int64

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(hash)
        bindings.append(now)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode((String, Int64).self) }
}

/// A user's rights on a hub.
struct GrantedRights: PostgresPreparedStatement {
    static let sql = "SELECT rights FROM hub_grant WHERE hub = $1 AND user_name = $2"
    typealias Row = Int32
    var hub: String
    var user: String

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(hub)
        bindings.append(user)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Int32.self) }
}
