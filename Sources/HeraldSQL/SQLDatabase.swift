public import HeraldModel

/// Something that runs statements: a database, or one transaction on it.
///
/// The requirements run on the caller's executor (`nonisolated(nonsending)`): SQLite answers there,
/// without a hop, as a GRDB call in a synchronous function would.
public protocol SQLSession: Sendable {
    var dialect: SQLDialect { get }
    /// Every row `sql`, a read, answers. Outside a transaction it may run on a connection that
    /// cannot write (SQLite's readers).
    nonisolated(nonsending) func query(_ sql: SQLQuery) async throws -> [SQLRow]
    /// Runs `sql`, a write; answers how many rows it inserted, changed or deleted.
    @discardableResult
    nonisolated(nonsending) func execute(_ sql: SQLQuery) async throws -> Int
    /// Runs `sql`, a write with `RETURNING`; answers its rows.
    nonisolated(nonsending) func executeReturning(_ sql: SQLQuery) async throws -> [SQLRow]
}

/// One service's database, whichever holds it: ``SQLiteDatabase`` (the embedded default, one
/// process) or ``HeraldPostgres`` (shared by replicas). A store written over this protocol is
/// written once; what differs between the two is here, not in the stores.
public protocol SQLDatabase: SQLSession {
    /// Runs `body` in one transaction: committed when it returns, rolled back when it throws (its
    /// own error comes out as itself). Statements inside go through the session `body` is given.
    nonisolated(nonsending) func transaction<Result: Sendable>(
        _ body: (any SQLSession) async throws -> Result
    ) async throws -> Result
    /// Runs `body` as a write transaction that may be shared with other callers' writes: on SQLite,
    /// the writes that arrive while one batch is written commit together in the next (one WAL sync
    /// for all of them; see ``SQLiteDatabase``), each in a savepoint of its own, so one that throws
    /// is rolled back alone and none is answered before its batch has committed. On PostgreSQL,
    /// whose writers do not wait for one another, it is ``transaction(_:)``.
    nonisolated(nonsending) func groupWrite<Result: Sendable>(
        _ body: @escaping @Sendable (any SQLSession) async throws -> Result
    ) async throws -> Result
    /// Brings the schema up to `schema`'s migrations; refuses a database a newer Herald migrated.
    func migrate(_ schema: SQLSchema) async throws
    /// After deleting content that must not outlive its deletion: SQLite's write-ahead log is
    /// checkpointed and truncated, so no copy stays there (the file itself runs `secure_delete`).
    /// PostgreSQL keeps dead rows until VACUUM whatever is done here: nothing.
    nonisolated(nonsending) func truncateLog() async throws
    /// The health check: the database takes a write.
    var healthCheck: HealthCheck { get }
    /// Whether `error` is the database aborting a transaction so that another can go on (a
    /// deadlock, a serialization failure): running it again resolves it. SQLite's one writer never
    /// does that.
    func isConflict(_ error: any Error) -> Bool
}

extension SQLDatabase {
    public func isConflict(_ error: any Error) -> Bool { false }

    /// ``transaction(_:)``, run again (up to 5 times, after a short random wait growing with each
    /// try) when the database aborted it as a conflict (``isConflict(_:)``): on PostgreSQL,
    /// replicas whose writes cross on the same rows, where the database aborts one (a deadlock, a
    /// serialization failure) rather than letting both wait forever.
    nonisolated(nonsending) public func transactionRetryingConflicts<Result: Sendable>(
        _ body: (any SQLSession) async throws -> Result
    ) async throws -> Result {
        var attempt = 0
        while true {
            do {
                return try await transaction(body)
            } catch  where attempt < 5 && isConflict(error) {
                attempt += 1
                try await Task.sleep(for: .milliseconds(Int64.random(in: 5...50) * Int64(attempt)))
            }
        }
    }

    nonisolated(nonsending) public func groupWrite<Result: Sendable>(
        _ body: @escaping @Sendable (any SQLSession) async throws -> Result
    ) async throws -> Result {
        try await transaction { session in try await body(session) }
    }

    /// The rows of `sql`, each decoded by `decode`.
    nonisolated(nonsending) public func query<T>(_ sql: SQLQuery, _ decode: (SQLRow) throws -> T) async throws -> [T] {
        try await query(sql).map(decode)
    }

    /// Runs `sql`, a DELETE of at most `batch` rows (a `LIMIT` in its subquery), one statement at a
    /// time until one deletes fewer: a large purge never holds the writer, or many row locks, for
    /// long. Answers the rows deleted.
    nonisolated(nonsending) public func deleteInBatches(batch: Int, _ sql: () -> SQLQuery) async throws -> Int {
        var total = 0
        while true {
            let deleted = try await execute(sql())
            total += deleted
            if deleted < batch { return total }
        }
    }

    /// Deletes every row of `tables` in one transaction, children before parents as listed, and
    /// answers how many went (ResetForTests). Ids keep counting up, so an id from before the reset
    /// never names a row made after it.
    nonisolated(nonsending) public func deleteAll(_ tables: [String]) async throws -> Int64 {
        try await transaction { session in
            var deleted: Int64 = 0
            for table in tables { deleted += Int64(try await session.execute(SQLQuery(raw: "DELETE FROM \(table)"))) }
            return deleted
        }
    }
}

extension SQLSession {
    /// The first row of `sql`, if any.
    nonisolated(nonsending) public func queryFirst(_ sql: SQLQuery) async throws -> SQLRow? {
        try await query(sql).first
    }
}

/// Statements run inside a migration step, synchronously (SQLite's migrator runs each step as one
/// synchronous transaction).
public protocol SQLMigrationSession {
    func query(_ sql: SQLQuery) throws -> [SQLRow]
    func execute(_ sql: SQLQuery) throws
}

/// One step of a schema's history.
///
/// Written once for both dialects (types through ``SQLFragment``). Its names are those each
/// dialect's history already has (they are never changed once released); a step one dialect's
/// history never had names nothing there, and a step only one dialect needs has no statements for
/// the other.
public struct SQLMigration: Sendable {
    /// The name in PostgreSQL's `herald_migrations`, nil if PostgreSQL's history has no such step.
    public let postgresName: String?
    /// The identifier in SQLite's `grdb_migrations`, nil if SQLite's history has no such step.
    public let sqliteName: String?
    public let statements: [SQLQuery]
    /// Statements only SQLite runs (e.g. rebuilding a table, which PostgreSQL alters in place).
    public let sqliteOnly: [SQLQuery]
    public let postgresOnly: [SQLQuery]
    /// Rows a SQLite step rewrites in Swift after its statements, in the same transaction (data
    /// that SQL alone cannot derive, e.g. rows read out of a stored JSON document).
    public let sqliteData: (@Sendable (any SQLMigrationSession) throws -> Void)?

    public init(
        postgres postgresName: String?, sqlite sqliteName: String?, _ statements: [SQLQuery],
        sqliteOnly: [SQLQuery] = [], postgresOnly: [SQLQuery] = [],
        sqliteData: (@Sendable (any SQLMigrationSession) throws -> Void)? = nil
    ) {
        self.postgresName = postgresName
        self.sqliteName = sqliteName
        self.statements = statements
        self.sqliteOnly = sqliteOnly
        self.postgresOnly = postgresOnly
        self.sqliteData = sqliteData
    }

    /// The statements `dialect` runs for this step, in order.
    public func statements(for dialect: SQLDialect) -> [String] {
        (statements + (dialect == .sqlite ? sqliteOnly : postgresOnly)).map { $0.render(dialect).text }
    }
}

/// A service's whole schema: its migrations in order. One description per service, for both
/// databases.
public struct SQLSchema: Sendable {
    public let migrations: [SQLMigration]
    /// Other migrators' SQLite identifiers that share the file (dispatch keeps the outbox and the
    /// inbox in one), known so they are not taken for a newer Herald's.
    public let sharingSQLite: [String]

    public init(_ migrations: [SQLMigration], sharingSQLite: [String] = []) {
        self.migrations = migrations
        self.sharingSQLite = sharingSQLite
    }

    /// The identifiers SQLite's history has, in order (a backup's manifest lists them).
    public var sqliteMigrationNames: [String] { migrations.compactMap(\.sqliteName) }
}
