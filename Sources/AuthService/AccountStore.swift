import Foundation
public import HeraldModel
public import HeraldProto
public import HeraldSQL
import HeraldService

/// herald-auth's schema, for both databases: accounts, tokens, hubs, keys, grants and lockouts.
///
/// The two histories were released apart and keep their names: SQLite's first tables were named
/// `user` with `user` columns, PostgreSQL's `account` and `user_name` (`user` is a reserved word
/// there). `v5-account` gives SQLite PostgreSQL's names, so that from there on every statement, and
/// every later migration, is written once.
public enum AuthSchema {
    public static let schema = SQLSchema([
        SQLMigration(
            postgres: nil, sqlite: "v1", [],
            sqliteOnly: [
                """
                CREATE TABLE user (
                    name TEXT PRIMARY KEY NOT NULL, password_hash TEXT NOT NULL, created_at INTEGER NOT NULL,
                    password_changed_at INTEGER NOT NULL)
                """,
                """
                CREATE TABLE token (
                    hash BLOB PRIMARY KEY NOT NULL, user TEXT NOT NULL, created_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL, revoked_at INTEGER
                ) WITHOUT ROWID
                """,
                "CREATE INDEX token_user ON token(user)",
                "CREATE INDEX token_expires ON token(expires_at)",
            ]),
        SQLMigration(
            postgres: nil, sqlite: "v2-hubs", [],
            sqliteOnly: [
                "CREATE TABLE hub (name TEXT PRIMARY KEY NOT NULL, created_at INTEGER NOT NULL)",
                """
                CREATE TABLE hub_key (
                    hub TEXT NOT NULL REFERENCES hub(name) ON DELETE CASCADE, name TEXT NOT NULL, rights INTEGER NOT NULL,
                    primary_key TEXT NOT NULL, secondary_key TEXT NOT NULL, created_at INTEGER NOT NULL,
                    PRIMARY KEY (hub, name)
                ) WITHOUT ROWID
                """,
                """
                CREATE TABLE hub_grant (
                    hub TEXT NOT NULL REFERENCES hub(name) ON DELETE CASCADE, user TEXT NOT NULL, rights INTEGER NOT NULL,
                    PRIMARY KEY (hub, user)
                ) WITHOUT ROWID
                """,
            ]),
        SQLMigration(
            postgres: nil, sqlite: "v3-hub-limits", [],
            sqliteOnly: ["ALTER TABLE hub ADD COLUMN max_installations INTEGER NOT NULL DEFAULT 0"]),
        // Tenancy by an immutable id: a hub made before keeps its name as its id (its devices and
        // sends are stored under that name), a new hub gets a random one.
        SQLMigration(
            postgres: nil, sqlite: "v4-hub-id", [],
            sqliteOnly: [
                "ALTER TABLE hub ADD COLUMN id TEXT", "UPDATE hub SET id = name",
                "CREATE UNIQUE INDEX hub_id ON hub (id)", "CREATE INDEX hub_name_nocase ON hub (name COLLATE NOCASE)",
            ]),
        // Failed logins and SAS signatures per name: lockouts outlive a restart.
        SQLMigration(
            postgres: nil, sqlite: "lockout", [],
            sqliteOnly: [
                """
                CREATE TABLE lockout (
                    name TEXT PRIMARY KEY NOT NULL, failures INTEGER NOT NULL, last_failure INTEGER NOT NULL,
                    locked_until INTEGER NOT NULL
                ) WITHOUT ROWID
                """,
                "CREATE INDEX lockout_last_failure ON lockout(last_failure)",
            ]),
        SQLMigration(
            postgres: "auth-v1", sqlite: nil, [],
            postgresOnly: [
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
                """
                CREATE TABLE lockout (
                    name TEXT PRIMARY KEY, failures INTEGER NOT NULL, last_failure BIGINT NOT NULL, locked_until BIGINT NOT NULL)
                """,
                "CREATE INDEX lockout_last_failure ON lockout (last_failure)",
            ]),
        SQLMigration(
            postgres: "auth-v2-hub-id", sqlite: nil, [],
            postgresOnly: [
                "ALTER TABLE hub ADD COLUMN id TEXT", "UPDATE hub SET id = name",
                "ALTER TABLE hub ALTER COLUMN id SET NOT NULL", "CREATE UNIQUE INDEX hub_id ON hub (id)",
                "CREATE INDEX hub_name_lower ON hub (lower(name))",
            ]),
        // One history from here: SQLite takes PostgreSQL's names, and finds hubs by lower(name) as
        // PostgreSQL does (hub names are ASCII, where both lower alike).
        SQLMigration(
            postgres: nil, sqlite: "v5-account", [],
            sqliteOnly: [
                "ALTER TABLE user RENAME TO account",
                "ALTER TABLE token RENAME COLUMN user TO user_name",
                "ALTER TABLE hub_grant RENAME COLUMN user TO user_name",
                "DROP INDEX hub_name_nocase",
                "CREATE INDEX hub_name_lower ON hub (lower(name))",
            ]),
        // A hub's API request rate at the edge: `requests_per_second` with a burst.
        SQLMigration(
            postgres: "auth-v3-request-rate", sqlite: "v6-request-rate",
            [
                "ALTER TABLE hub ADD COLUMN requests_per_second BIGINT NOT NULL DEFAULT 0",
                "ALTER TABLE hub ADD COLUMN request_burst BIGINT NOT NULL DEFAULT 0",
            ]),
        // The audit trail (``AuditStore``): append-only, each record chained to the one before.
        SQLMigration(
            postgres: "auth-v4-audit", sqlite: "v7-audit",
            [
                """
                CREATE TABLE audit (
                    seq BIGINT PRIMARY KEY NOT NULL, at BIGINT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
                    hub TEXT NOT NULL, hub_id TEXT NOT NULL, target TEXT NOT NULL, client_address TEXT NOT NULL,
                    request_id TEXT NOT NULL, status BIGINT NOT NULL, detail TEXT NOT NULL, prev_hash TEXT NOT NULL,
                    hash TEXT NOT NULL)
                """,
                "CREATE INDEX audit_hub ON audit (hub_id, seq)",
            ]),
    ])
}

/// Accounts and bearer tokens, in whichever database `database-url` names.
///
/// Holds no secret in the clear: passwords as ``PasswordHasher`` strings, tokens as their SHA-256
/// (tokens are 256 random bits, so a fast hash is enough to make a stolen database useless). Token
/// revocation is a row update every replica reads at the next request, so it holds everywhere at once.
///
/// On SQLite the reads of Authenticate (a password hash, a token's user) take a reader connection
/// on the caller's executor, so they stay on the event loop that started the call.
public final class AccountStore: Sendable {
    private let db: any SQLDatabase
    /// Unix epoch milliseconds; injected by tests that check expiry without waiting.
    private let now: @Sendable () -> Int64

    public init(db: any SQLDatabase, now: @escaping @Sendable () -> Int64 = unixMillis) async throws {
        self.db = db
        self.now = now
        try await db.migrate(AuthSchema.schema)
    }

    /// Whether other processes share this store (PostgreSQL): then a credential this process
    /// verified may have been changed by another since, and the cache checks the stored hash again.
    public var isShared: Bool { db.dialect == .postgres }

    // MARK: users

    nonisolated(nonsending) public func createUser(_ name: String, passwordHash: String) async throws -> User {
        let now = self.now()
        let inserted = try await db.executeReturning(
            """
            INSERT INTO account (name, password_hash, created_at, password_changed_at)
            VALUES (\(name), \(passwordHash), \(now), \(now)) ON CONFLICT (name) DO NOTHING RETURNING name
            """)
        guard !inserted.isEmpty else { throw ServiceError(.alreadyExists, "user \(name) already exists") }
        return User(name: name, createdAtUnixMs: now, passwordChangedAtUnixMs: now)
    }

    /// The stored hash of `name`, nil for an unknown user.
    nonisolated(nonsending) public func passwordHash(of name: String) async throws -> String? {
        try await db.queryFirst("SELECT password_hash FROM account WHERE name = \(name)").map { try $0[0] }
    }

    /// Replaces the hash; with `revokeTokens`, every live token of the user stops working too.
    nonisolated(nonsending) public func setPasswordHash(_ name: String, _ hash: String, revokeTokens: Bool)
        async throws -> User
    {
        let now = self.now()
        return try await db.transaction { session in
            guard
                let created: Int64 = try await session.executeReturning(
                    """
                    UPDATE account SET password_hash = \(hash), password_changed_at = \(now) WHERE name = \(name)
                    RETURNING created_at
                    """
                ).first?[0]
            else { throw ServiceError.notFound("user \(name) not found") }
            if revokeTokens { try await Self.revokeAll(of: name, at: now, in: session) }
            return User(name: name, createdAtUnixMs: created, passwordChangedAtUnixMs: now)
        }
    }

    nonisolated(nonsending) public func deleteUser(_ name: String) async throws {
        try await db.transaction { session in
            guard try await session.execute("DELETE FROM account WHERE name = \(name)") > 0 else {
                throw ServiceError.notFound("user \(name) not found")
            }
            try await session.execute("DELETE FROM token WHERE user_name = \(name)")
        }
    }

    /// Erase: the account and every token of `name`, whether or not the account still exists (a
    /// second erase after a crash); returns how many rows went.
    nonisolated(nonsending) public func eraseUser(_ name: String) async throws -> Int64 {
        try await db.transaction { session in
            let accounts = try await session.execute("DELETE FROM account WHERE name = \(name)")
            let tokens = try await session.execute("DELETE FROM token WHERE user_name = \(name)")
            return Int64(accounts + tokens)
        }
    }

    /// Export: the account (nil when there is none) and how many of its tokens are live.
    nonisolated(nonsending) public func exportUser(_ name: String) async throws -> (user: User?, liveTokens: Int64) {
        let now = self.now()
        let user = try await db.queryFirst(
            "SELECT created_at, password_changed_at FROM account WHERE name = \(name)"
        ).map { User(name: name, createdAtUnixMs: try $0[0], passwordChangedAtUnixMs: try $0[1]) }
        let live: Int64 = try await db.query(
            "SELECT COUNT(*) FROM token WHERE user_name = \(name) AND revoked_at IS NULL AND expires_at > \(now)"
        )[0][0]
        return (user, live)
    }

    /// Deletes every account and token (ResetForTests).
    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 {
        try await db.deleteAll(["token", "account"])
    }

    nonisolated(nonsending) public func listUsers() async throws -> [User] {
        try await db.query("SELECT name, created_at, password_changed_at FROM account ORDER BY name") {
            User(name: try $0[0], createdAtUnixMs: try $0[1], passwordChangedAtUnixMs: try $0[2])
        }
    }

    nonisolated(nonsending) public func userExists(_ name: String) async throws -> Bool {
        try await db.queryFirst("SELECT 1 FROM account WHERE name = \(name)") != nil
    }

    // MARK: tokens

    nonisolated(nonsending) public func insertToken(hash: Data, user: String, expiresAt: Int64) async throws {
        let now = self.now()
        try await db.execute(
            "INSERT INTO token (hash, user_name, created_at, expires_at) VALUES (\(hash), \(user), \(now), \(expiresAt))"
        )
    }

    /// The user of a live (unexpired, unrevoked) token and when it expires.
    nonisolated(nonsending) public func tokenUser(hash: Data) async throws -> (user: String, expiresAt: Int64)? {
        try await db.queryFirst(
            "SELECT user_name, expires_at FROM token WHERE hash = \(hash) AND revoked_at IS NULL AND expires_at > \(now())"
        ).map { (try $0[0], try $0[1]) }
    }

    nonisolated(nonsending) public func revokeToken(hash: Data) async throws -> Int64 {
        let now = self.now()
        return Int64(
            try await db.execute(
                """
                UPDATE token SET revoked_at = \(now) WHERE hash = \(hash) AND revoked_at IS NULL AND expires_at > \(now)
                """))
    }

    nonisolated(nonsending) public func revokeTokens(of user: String) async throws -> Int64 {
        try await Self.revokeAll(of: user, at: now(), in: db)
    }

    /// Deletes tokens that expired or were revoked more than `grace` ago; returns how many.
    nonisolated(nonsending) public func purgeTokens(grace: Int64) async throws -> Int {
        let cutoff = now() - grace
        return try await db.execute("DELETE FROM token WHERE expires_at < \(cutoff) OR revoked_at < \(cutoff)")
    }

    @discardableResult
    nonisolated(nonsending) private static func revokeAll(of user: String, at now: Int64, in session: any SQLSession)
        async throws -> Int64
    {
        Int64(
            try await session.execute(
                """
                UPDATE token SET revoked_at = \(now) WHERE user_name = \(user) AND revoked_at IS NULL AND expires_at > \(now)
                """))
    }
}
