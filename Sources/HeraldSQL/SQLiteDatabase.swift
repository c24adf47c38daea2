import Foundation
public import GRDB
import HeraldModel
import Synchronization

/// A service's SQLite database (GRDB on the system libsqlite3) as an ``SQLDatabase``.
///
/// GRDB runs a transaction as one synchronous closure, but a store written once for both databases
/// runs its transactions as async code (on PostgreSQL each statement is a round trip). So a
/// transaction here is `BEGIN IMMEDIATE`, the body's statements and `COMMIT`, each a synchronous
/// call on GRDB's one writer connection, and a gate of this type keeps every other write out
/// between them: every write to the file goes through this object (one per file; see
/// ``OpenedDatabase``), which is why the configuration must allow GRDB to leave a transaction open
/// between calls (``HeraldDatabase/configuration`` does). The body's statements never leave the
/// caller's thread, so an uncontended transaction costs what GRDB's own `write` does.
///
/// Reads outside a transaction take a reader connection of the pool: in WAL mode they never wait
/// for the writer and see only what was committed. Over a `DatabaseQueue` (one connection, the
/// tests' in-memory databases) reads go through the gate too.
public final class SQLiteDatabase: SQLDatabase {
    public let writer: any DatabaseWriter
    let gate = WriterGate()
    /// Writes waiting for their group commit (``groupWrite(_:)``).
    let commits = GroupCommitQueue()
    private let readersApart: Bool
    public var dialect: SQLDialect { .sqlite }

    /// The task running a transaction on this database, so that a statement sent to the database
    /// instead of the transaction's session is an error rather than a deadlock on the gate.
    @TaskLocal static var transactionOwner: ObjectIdentifier?

    public init(_ writer: any DatabaseWriter) {
        // trap-ok: the configuration is Herald code (HeraldDatabase.configuration).
        precondition(
            writer.configuration.allowsUnsafeTransactions,
            "SQLiteDatabase needs Configuration.allowsUnsafeTransactions (HeraldDatabase.configuration sets it)")
        self.writer = writer
        self.readersApart = writer is DatabasePool
    }

    /// The file's path (for the disk-space gauge and messages).
    public var path: String { writer.path }

    nonisolated(nonsending) public func query(_ sql: SQLQuery) async throws -> [SQLRow] {
        // A statement over rows runs once per row: one transaction, all or nothing.
        if sql.rows != nil { return try await transaction { try await $0.query(sql) } }
        if readersApart { return try read(sql) }
        try checkOutsideTransaction()
        await gate.acquire()
        defer { gate.release() }
        return try onWriter { db in try Self.rows(db, sql) }
    }

    @discardableResult
    nonisolated(nonsending) public func execute(_ sql: SQLQuery) async throws -> Int {
        if sql.rows != nil { return try await transaction { try await $0.execute(sql) } }
        try checkOutsideTransaction()
        await gate.acquire()
        defer { gate.release() }
        return try onWriter { db in try Self.execute(db, sql) }
    }

    nonisolated(nonsending) public func executeReturning(_ sql: SQLQuery) async throws -> [SQLRow] {
        if sql.rows != nil { return try await transaction { try await $0.query(sql) } }
        try checkOutsideTransaction()
        await gate.acquire()
        defer { gate.release() }
        return try onWriter { db in try Self.rows(db, sql) }
    }

    nonisolated(nonsending) public func transaction<Result: Sendable>(
        _ body: (any SQLSession) async throws -> Result
    ) async throws -> Result {
        try checkOutsideTransaction()
        await gate.acquire()
        defer { gate.release() }
        // Cached: compiling BEGIN and COMMIT again for every transaction cost more than running them.
        try onWriter { db in try db.cachedStatement(sql: "BEGIN IMMEDIATE").execute() }
        do {
            let result = try await Self.$transactionOwner.withValue(ObjectIdentifier(self)) {
                try await body(Session(database: self))
            }
            try onWriter { db in try db.cachedStatement(sql: "COMMIT").execute() }
            return result
        } catch {
            // A failed COMMIT can leave the transaction open, as can the body's error.
            try? onWriter { db in if db.isInsideTransaction { try db.execute(sql: "ROLLBACK") } }
            throw error
        }
    }

    public func migrate(_ schema: SQLSchema) async throws {
        var sharing = DatabaseMigrator()
        for name in schema.sharingSQLite { sharing.registerMigration(name) { _ in } }
        await gate.acquire()
        defer { gate.release() }
        try HeraldDatabase.migrate(Self.migrator(for: schema), writer, sharing: [sharing])
    }

    /// `schema`'s SQLite history as GRDB's migrator (tests migrate part of the way with it).
    public static func migrator(for schema: SQLSchema) -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in schema.migrations {
            guard let name = migration.sqliteName else { continue }
            let statements = migration.statements(for: .sqlite)
            let data = migration.sqliteData
            migrator.registerMigration(name) { db in
                for statement in statements { try db.execute(sql: statement) }
                try data?(MigrationSession(db: db))
            }
        }
        return migrator
    }

    nonisolated(nonsending) public func truncateLog() async throws {
        guard let pool = writer as? DatabasePool else { return }
        try checkOutsideTransaction()
        await gate.acquire()
        defer { gate.release() }
        try Self.checkpoint(pool)
    }

    /// A heartbeat row in a table of its own: fails while the file or its WAL cannot be written
    /// (read-only file, full disk, I/O error) or the write lock is held past the busy timeout.
    /// Two statements, each its own transaction: safe beside a store that still writes through
    /// GRDB's own `write` rather than through this object.
    public var healthCheck: HealthCheck {
        HealthCheck("database") { [self] in
            try await execute(
                "CREATE TABLE IF NOT EXISTS herald_heartbeat (id INTEGER PRIMARY KEY, at INTEGER NOT NULL)")
            try await execute("INSERT OR REPLACE INTO herald_heartbeat (id, at) VALUES (1, \(unixMillis()))")
        }
    }

    /// A migration step's statements, in GRDB's migration transaction.
    private struct MigrationSession: SQLMigrationSession {
        let db: Database
        func query(_ sql: SQLQuery) throws -> [SQLRow] { try SQLiteDatabase.rows(db, sql) }
        func execute(_ sql: SQLQuery) throws { _ = try SQLiteDatabase.execute(db, sql) }
    }

    /// A transaction's statements: on the writer, which the transaction holds.
    struct Session: SQLSession {
        let database: SQLiteDatabase
        var dialect: SQLDialect { .sqlite }

        nonisolated(nonsending) func query(_ sql: SQLQuery) async throws -> [SQLRow] {
            try database.onWriter { db in try SQLiteDatabase.rows(db, sql) }
        }

        @discardableResult
        nonisolated(nonsending) func execute(_ sql: SQLQuery) async throws -> Int {
            try database.onWriter { db in try SQLiteDatabase.execute(db, sql) }
        }

        nonisolated(nonsending) func executeReturning(_ sql: SQLQuery) async throws -> [SQLRow] {
            try await query(sql)
        }
    }

    // The synchronous GRDB calls live in synchronous functions: in an async one, GRDB's async
    // overloads (which hop to its queue) would be chosen.

    func checkOutsideTransaction() throws {
        if Self.transactionOwner == ObjectIdentifier(self) {
            throw ServiceError(.internal, "a statement was sent to the database inside its own transaction")
        }
    }

    private func read(_ sql: SQLQuery) throws -> [SQLRow] {
        // One statement is its own read transaction: `unsafeRead` spares GRDB's BEGIN/COMMIT.
        try writer.unsafeRead { db in try Self.rows(db, sql) }
    }

    func onWriter<T>(_ body: (Database) throws -> T) throws -> T {
        try writer.writeWithoutTransaction(body)
    }

    private static func checkpoint(_ pool: DatabasePool) throws {
        _ = try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
    }

    /// Every row `sql` answers (see ``SQLiteCalls``).
    static func rows(_ db: Database, _ sql: SQLQuery) throws -> [SQLRow] {
        try SQLiteCalls.run(db, sql, answering: true).rows
    }

    /// Runs `sql` in GRDB's `db` (a tool that writes a file directly, as herald-bench seeds one);
    /// answers the rows changed.
    @discardableResult
    public static func execute(_ db: Database, _ sql: SQLQuery) throws -> Int {
        try SQLiteCalls.run(db, sql, answering: false).changes
    }
}

/// One holder at a time, the rest waiting in order without a thread. Not cancellable: a wait
/// lasts one transaction of the same process.
final class WriterGate: Sendable {
    private let state = Mutex<(held: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func acquire() async {
        let free = state.withLock { state in
            if state.held { return false }
            state.held = true
            return true
        }
        if free { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resume = state.withLock { state in
                if state.held {
                    state.waiters.append(continuation)
                    return false
                }
                state.held = true
                return true
            }
            if resume { continuation.resume() }
        }
    }

    /// Hands the gate to the first waiter, or frees it.
    func release() {
        let next: CheckedContinuation<Void, Never>? = state.withLock { state in
            if state.waiters.isEmpty {
                state.held = false
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
