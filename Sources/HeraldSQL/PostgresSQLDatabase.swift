public import HeraldModel
import Logging
import NIOCore
import PostgresNIO

/// A service's PostgreSQL schema (postgres-nio's pool, ``HeraldPostgres``) as an ``SQLDatabase``.
///
/// Statements are prepared once per connection, keyed by their text (``PostgresStatements``: up to
/// `statement_cache` texts, 256 unless the database URL says otherwise; 0 runs every statement
/// unprepared, as a pooler in transaction mode needs). Values are always bound, never spliced.
public struct PostgresSQLDatabase: SQLDatabase {
    public let postgres: HeraldPostgres
    public var dialect: SQLDialect { .postgres }

    public init(_ postgres: HeraldPostgres) { self.postgres = postgres }

    nonisolated(nonsending) public func query(_ sql: SQLQuery) async throws -> [SQLRow] {
        // A statement over rows may take several runs: one transaction, all or nothing.
        if sql.rows != nil { return try await transaction { try await $0.query(sql) } }
        let (text, values) = sql.render(.postgres)
        return try await postgres.client.withConnection { connection in
            try await Self.rows(text, values, on: connection, postgres.statements, logger: postgres.logger)
        }
    }

    @discardableResult
    nonisolated(nonsending) public func execute(_ sql: SQLQuery) async throws -> Int {
        if sql.rows != nil { return try await transaction { try await $0.execute(sql) } }
        let (text, values) = sql.render(.postgres)
        return try await postgres.client.withConnection { connection in
            try await Self.execute(text, values, on: connection, postgres.statements, logger: postgres.logger)
        }
    }

    nonisolated(nonsending) public func executeReturning(_ sql: SQLQuery) async throws -> [SQLRow] {
        try await query(sql)
    }

    nonisolated(nonsending) public func transaction<Result: Sendable>(
        _ body: (any SQLSession) async throws -> Result
    ) async throws -> Result {
        try await postgres.transaction { connection in
            try await body(Session(connection: connection, statements: postgres.statements, logger: postgres.logger))
        }
    }

    public func migrate(_ schema: SQLSchema) async throws {
        try await postgres.migrate(
            [.heartbeat]
                + schema.migrations.compactMap { migration in
                    migration.postgresName.map { PostgresMigration($0, migration.statements(for: .postgres)) }
                })
    }

    nonisolated(nonsending) public func truncateLog() async throws {}

    public var healthCheck: HealthCheck { postgres.healthCheck }

    /// A deadlock (40P01) or a serialization failure (40001).
    public func isConflict(_ error: any Error) -> Bool { Self.isConflict(error) }

    public static func isConflict(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError else { return false }
        return ["40P01", "40001"].contains(error.serverInfo?[.sqlState] ?? "")
    }

    private struct Session: SQLSession {
        let connection: PostgresConnection
        let statements: PostgresStatements
        let logger: Logger
        var dialect: SQLDialect { .postgres }

        nonisolated(nonsending) func query(_ sql: SQLQuery) async throws -> [SQLRow] {
            let (text, runs) = sql.postgresRuns()
            var rows: [SQLRow] = []
            for values in runs {
                rows += try await PostgresSQLDatabase.rows(text, values, on: connection, statements, logger: logger)
            }
            return rows
        }

        @discardableResult
        nonisolated(nonsending) func execute(_ sql: SQLQuery) async throws -> Int {
            let (text, runs) = sql.postgresRuns()
            var changed = 0
            for values in runs {
                changed += try await PostgresSQLDatabase.execute(
                    text, values, on: connection, statements, logger: logger)
            }
            return changed
        }

        nonisolated(nonsending) func executeReturning(_ sql: SQLQuery) async throws -> [SQLRow] {
            try await query(sql)
        }
    }

    /// The rows of `text` run with `values` on `connection`: prepared when ``PostgresStatements``
    /// names it.
    static func rows(
        _ text: String, _ values: [SQLValue], on connection: PostgresConnection, _ statements: PostgresStatements,
        logger: Logger
    ) async throws -> [SQLRow] {
        let key = PostgresStatements.key(text, values, counting: false)
        guard let statement = statements.statement(key, text: text, counting: false) else {
            return try await collect(try await connection.query(query(text, values), logger: logger))
        }
        return try await prepared(statement, key: key, values, on: connection, statements, logger: logger)
    }

    /// The number of rows `text` run with `values` on `connection` changed, without `RETURNING`
    /// rows: prepared as ``PostgresStatements/counting(_:)`` when ``PostgresStatements`` names it,
    /// else its command tag's count.
    static func execute(
        _ text: String, _ values: [SQLValue], on connection: PostgresConnection, _ statements: PostgresStatements,
        logger: Logger
    ) async throws -> Int {
        let key = PostgresStatements.key(text, values, counting: true)
        guard let statement = statements.statement(key, text: text, counting: true) else {
            return try await connection.query(query(text, values), logger: logger).get().metadata.rows ?? 0
        }
        let rows = try await prepared(statement, key: key, values, on: connection, statements, logger: logger)
        guard let row = rows.first else { return 0 }
        let count: Int64 = try row[0]
        return Int(count)
    }

    /// The rows of `statement` run with `values` on `connection`, prepared there the first time.
    private static func prepared(
        _ statement: SeamStatement.Current, key: String, _ values: [SQLValue], on connection: PostgresConnection,
        _ statements: PostgresStatements, logger: Logger
    ) async throws -> [SQLRow] {
        do {
            return try await SeamStatement.$current.withValue(statement) {
                try await collect(
                    try await connection.execute(SeamStatement(bindings: bindings(values)), logger: logger))
            }
        } catch {
            statements.failed(key, name: statement.name, error)
            throw error
        }
    }

    /// Every row of `sequence`, as the seam's rows.
    private static func collect(_ sequence: some AsyncSequence<PostgresRow, any Error>) async throws -> [SQLRow] {
        var rows: [SQLRow] = []
        for try await row in sequence { rows.append(SQLRow(try row.map(SQLValue.init))) }
        return rows
    }

    static func query(_ text: String, _ values: [SQLValue]) -> PostgresQuery {
        PostgresQuery(unsafeSQL: text, binds: bindings(values))
    }

    static func bindings(_ values: [SQLValue]) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: values.count)
        for value in values {
            switch value {
            case .null: bindings.appendNull()
            case .integer(let integer): bindings.append(integer)
            case .text(let text): bindings.append(text)
            case .bytes(let bytes): bindings.append(ByteBuffer(bytes: bytes))
            case .bool(let bool): bindings.append(bool)
            case .integers(let integers): bindings.append(integers)
            case .texts(let texts): bindings.append(texts)
            case .bools(let bools): bindings.append(bools)
            case .byteStrings(let strings): bindings.append(strings.map { ByteBuffer(bytes: $0) })
            }
        }
        return bindings
    }
}

extension SQLValue {
    /// The column types Herald's schemas use; any other is read as text.
    init(_ cell: PostgresCell) throws {
        guard cell.bytes != nil else {
            self = .null
            return
        }
        switch cell.dataType {
        case .int2, .int4, .int8: self = .integer(try cell.decode(Int64.self))
        case .bool: self = .bool(try cell.decode(Bool.self))
        case .bytea: self = .bytes(Array(try cell.decode(ByteBuffer.self).readableBytesView))
        default: self = .text(try cell.decode(String.self))
        }
    }
}

extension HeraldPostgres {
    /// This schema as an ``SQLDatabase``, for stores written once for both databases.
    public var sql: PostgresSQLDatabase { PostgresSQLDatabase(self) }
}
