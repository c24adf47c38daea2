import Foundation
public import GRDB
public import HeraldModel
public import HeraldProto
public import HeraldRPC
public import HeraldService

/// Accounts and bearer tokens, whichever database holds them: ``SQLiteAccountStore`` (embedded, one
/// process) or ``PostgresAccountStore`` (shared by replicas).
///
/// Holds no secret in the clear: passwords as ``PasswordHasher`` strings, tokens as their SHA-256
/// (tokens are 256 random bits, so a fast hash is enough to make a stolen database useless).
///
/// SQLite's store meets the requirements with synchronous methods: called through the protocol they
/// still run on the caller's executor (`nonisolated(nonsending)`), so Authenticate's reads stay on
/// the event loop that started it.
public protocol AccountStore: Sendable {
    /// Whether other processes share this store: then a credential this process verified may have
    /// been changed by another since, and the cache checks the stored hash again.
    var isShared: Bool { get }
    nonisolated(nonsending) func createUser(_ name: String, passwordHash: String) async throws -> User
    /// The stored hash of `name`, nil for an unknown user.
    nonisolated(nonsending) func passwordHash(of name: String) async throws -> String?
    /// Replaces the hash; with `revokeTokens`, every live token of the user stops working too.
    nonisolated(nonsending) func setPasswordHash(_ name: String, _ hash: String, revokeTokens: Bool) async throws
        -> User
    nonisolated(nonsending) func deleteUser(_ name: String) async throws
    /// Erase: the account and every token of `name`, whether or not the account still exists (a
    /// second erase after a crash); returns how many rows went.
    nonisolated(nonsending) func eraseUser(_ name: String) async throws -> Int64
    /// Export: the account (nil when there is none) and how many of its tokens are live.
    nonisolated(nonsending) func exportUser(_ name: String) async throws -> (user: User?, liveTokens: Int64)
    /// Deletes every account and token (ResetForTests).
    nonisolated(nonsending) func deleteEverything() async throws -> Int64
    nonisolated(nonsending) func listUsers() async throws -> [User]
    nonisolated(nonsending) func userExists(_ name: String) async throws -> Bool
    nonisolated(nonsending) func insertToken(hash: Data, user: String, expiresAt: Int64) async throws
    /// The user of a live (unexpired, unrevoked) token and when it expires.
    nonisolated(nonsending) func tokenUser(hash: Data) async throws -> (user: String, expiresAt: Int64)?
    nonisolated(nonsending) func revokeToken(hash: Data) async throws -> Int64
    nonisolated(nonsending) func revokeTokens(of user: String) async throws -> Int64
    /// Deletes tokens that expired or were revoked more than `grace` ago; returns how many.
    nonisolated(nonsending) func purgeTokens(grace: Int64) async throws -> Int
}

/// Accounts and bearer tokens in herald-auth's SQLite file.
public final class SQLiteAccountStore: AccountStore {
    public var isShared: Bool { false }
    private let db: any DatabaseWriter
    /// Unix epoch milliseconds; injected by tests that check expiry without waiting.
    private let now: @Sendable () -> Int64

    public init(db: any DatabaseWriter, now: @escaping @Sendable () -> Int64 = unixMillis) throws {
        self.db = db
        self.now = now
        try HeraldDatabase.migrate(Self.migrator, db)
    }

    public static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE user (
                        name TEXT PRIMARY KEY NOT NULL,
                        password_hash TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        password_changed_at INTEGER NOT NULL
                    );
                    CREATE TABLE token (
                        hash BLOB PRIMARY KEY NOT NULL,
                        user TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL,
                        revoked_at INTEGER
                    ) WITHOUT ROWID;
                    CREATE INDEX token_user ON token(user);
                    CREATE INDEX token_expires ON token(expires_at);
                    """)
        }
        SQLiteHubStore.migrate(&migrator)
        SQLiteLockoutLedger.migrate(&migrator)
        return migrator
    }

    // MARK: users

    public func createUser(_ name: String, passwordHash: String) throws -> User {
        let now = self.now()
        do {
            try db.write { db in
                try db.execute(
                    sql: "INSERT INTO user (name, password_hash, created_at, password_changed_at) VALUES (?, ?, ?, ?)",
                    arguments: [name, passwordHash, now, now])
            }
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY {
            throw ServiceError(.alreadyExists, "user \(name) already exists")
        }
        return User(name: name, createdAtUnixMs: now, passwordChangedAtUnixMs: now)
    }

    /// The stored hash of `name`, nil for an unknown user.
    public func passwordHash(of name: String) throws -> String? {
        // One SELECT is its own read transaction: `unsafeRead` spares GRDB's BEGIN/COMMIT, half
        // the cost of a read this small (callgrind).
        try db.unsafeRead { db in
            try String.fetchOne(
                db.cachedStatement(sql: "SELECT password_hash FROM user WHERE name = ?"), arguments: [name])
        }
    }

    /// Replaces the hash; with `revokeTokens`, every live token of the user stops working too.
    public func setPasswordHash(_ name: String, _ hash: String, revokeTokens: Bool) throws -> User {
        let now = self.now()
        return try db.write { db in
            try db.execute(
                sql: "UPDATE user SET password_hash = ?, password_changed_at = ? WHERE name = ?",
                arguments: [hash, now, name])
            guard db.changesCount == 1 else { throw ServiceError.notFound("user \(name) not found") }
            if revokeTokens { _ = try Self.revokeAll(of: name, at: now, in: db) }
            let row = try Row.fetchOne(db, sql: "SELECT created_at FROM user WHERE name = ?", arguments: [name])!
            return User(name: name, createdAtUnixMs: row["created_at"], passwordChangedAtUnixMs: now)
        }
    }

    public func deleteUser(_ name: String) throws {
        try db.write { db in
            try db.execute(sql: "DELETE FROM user WHERE name = ?", arguments: [name])
            guard db.changesCount == 1 else { throw ServiceError.notFound("user \(name) not found") }
            try db.execute(sql: "DELETE FROM token WHERE user = ?", arguments: [name])
        }
    }

    public func eraseUser(_ name: String) throws -> Int64 {
        try db.write { db in
            try db.execute(sql: "DELETE FROM user WHERE name = ?", arguments: [name])
            let accounts = db.changesCount
            try db.execute(sql: "DELETE FROM token WHERE user = ?", arguments: [name])
            return Int64(accounts + db.changesCount)
        }
    }

    public func exportUser(_ name: String) throws -> (user: User?, liveTokens: Int64) {
        let now = self.now()
        return try db.read { db in
            let user = try Row.fetchOne(
                db, sql: "SELECT created_at, password_changed_at FROM user WHERE name = ?", arguments: [name]
            ).map {
                User(name: name, createdAtUnixMs: $0["created_at"], passwordChangedAtUnixMs: $0["password_changed_at"])
            }
            let live =
                try Int64.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM token WHERE user = ? AND revoked_at IS NULL AND expires_at > ?",
                    arguments: [name, now]) ?? 0
            return (user, live)
        }
    }

    /// Deletes every account and token (ResetForTests).
    public func deleteEverything() throws -> Int64 {
        try TestMode.deleteAll(["token", "user"], in: db)
    }

    public func listUsers() throws -> [User] {
        try db.read { db in
            try Row.fetchAll(db, sql: "SELECT name, created_at, password_changed_at FROM user ORDER BY name").map {
                User(
                    name: $0["name"], createdAtUnixMs: $0["created_at"],
                    passwordChangedAtUnixMs: $0["password_changed_at"])
            }
        }
    }

    public func userExists(_ name: String) throws -> Bool {
        try db.read { db in try Bool.fetchOne(db, sql: "SELECT 1 FROM user WHERE name = ?", arguments: [name]) ?? false
        }
    }

    // MARK: tokens

    public func insertToken(hash: Data, user: String, expiresAt: Int64) throws {
        let now = self.now()
        try db.write { db in
            try db.execute(
                sql: "INSERT INTO token (hash, user, created_at, expires_at) VALUES (?, ?, ?, ?)",
                arguments: [hash, user, now, expiresAt])
        }
    }

    /// The user of a live (unexpired, unrevoked) token.
    public func tokenUser(hash: Data) throws -> (user: String, expiresAt: Int64)? {
        try db.unsafeRead { db in  // one SELECT, see passwordHash(of:)
            try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT user, expires_at FROM token WHERE hash = ? AND revoked_at IS NULL AND expires_at > ?"),
                arguments: [hash, now()]
            ).map { row in (row[0], row[1]) }
        }
    }

    public func revokeToken(hash: Data) throws -> Int64 {
        let now = self.now()
        return try db.write { db in
            try db.execute(
                sql: "UPDATE token SET revoked_at = ? WHERE hash = ? AND revoked_at IS NULL AND expires_at > ?",
                arguments: [now, hash, now])
            return Int64(db.changesCount)
        }
    }

    public func revokeTokens(of user: String) throws -> Int64 {
        let now = self.now()
        return try db.write { db in try Self.revokeAll(of: user, at: now, in: db) }
    }

    /// Deletes tokens that expired or were revoked more than `grace` ago; returns how many.
    public func purgeTokens(grace: Int64) throws -> Int {
        let cutoff = now() - grace
        return try db.write { db in
            try db.execute(
                sql: "DELETE FROM token WHERE expires_at < ? OR revoked_at < ?", arguments: [cutoff, cutoff])
            return db.changesCount
        }
    }

    private static func revokeAll(of user: String, at now: Int64, in db: Database) throws -> Int64 {
        try db.execute(
            sql: "UPDATE token SET revoked_at = ? WHERE user = ? AND revoked_at IS NULL AND expires_at > ?",
            arguments: [now, user, now])
        return Int64(db.changesCount)
    }
}
