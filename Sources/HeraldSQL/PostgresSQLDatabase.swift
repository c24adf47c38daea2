public import HeraldModel
import Logging
import NIOCore
import PostgresNIO

/// A service's PostgreSQL schema (postgres-nio's pool, ``HeraldPostgres``) as an ``SQLDatabase``.
///
/// Statements go unprepared (one round trip: parse, bind and execute together); values are always
/// bound, never spliced.
public struct PostgresSQLDatabase: SQLDatabase {
    public let postgres: HeraldPostgres
    public var dialect: SQLDialect { .postgres }

    public init(_ postgres: HeraldPostgres) { self.postgres = postgres }

    nonisolated(nonsending) public func query(_ sql: SQLQuery) async throws -> [SQLRow] {
        // A statement over rows may take several runs: one transaction, all or nothing.
        if sql.rows != nil { return try await transaction { try await $0.query(sql) } }
        return try await Self.rows(try await postgres.client.query(Self.query(sql), logger: postgres.logger))
    }

    @discardableResult
    nonisolated(nonsending) public func execute(_ sql: SQLQuery) async throws -> Int {
        if sql.rows != nil { return try await transaction { try await $0.execute(sql) } }
        let query = Self.query(sql)
        return try await postgres.client.withConnection { connection in
            try await Self.execute(query, on: connection, logger: postgres.logger)
        }
    }

    nonisolated(nonsending) public func executeReturning(_ sql: SQLQuery) async throws -> [SQLRow] {
        try await query(sql)
    }

    nonisolated(nonsending) public func transaction<Result: Sendable>(
        _ body: (any SQLSession) async throws -> Result
    ) async throws -> Result {
        try await postgres.transaction { connection in
            try await body(Session(connection: connection, logger: postgres.logger))
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
        let logger: Logger
        var dialect: SQLDialect { .postgres }

        nonisolated(nonsending) func query(_ sql: SQLQuery) async throws -> [SQLRow] {
            var rows: [SQLRow] = []
            for query in PostgresSQLDatabase.queries(sql) {
                rows += try await PostgresSQLDatabase.rows(try await connection.query(query, logger: logger))
            }
            return rows
        }

        @discardableResult
        nonisolated(nonsending) func execute(_ sql: SQLQuery) async throws -> Int {
            var changed = 0
            for query in PostgresSQLDatabase.queries(sql) {
                changed += try await PostgresSQLDatabase.execute(query, on: connection, logger: logger)
            }
            return changed
        }

        nonisolated(nonsending) func executeReturning(_ sql: SQLQuery) async throws -> [SQLRow] {
            try await query(sql)
        }
    }

    static func query(_ sql: SQLQuery) -> PostgresQuery {
        let (text, values) = sql.render(.postgres)
        return query(text, values)
    }

    /// The statements `sql` runs as: one, or one per chunk of its rows (``SQLRowSource``).
    static func queries(_ sql: SQLQuery) -> [PostgresQuery] {
        let (text, runs) = sql.postgresRuns()
        return runs.map { query(text, $0) }
    }

    static func query(_ text: String, _ values: [SQLValue]) -> PostgresQuery {
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
        return PostgresQuery(unsafeSQL: text, binds: bindings)
    }

    /// The command tag's row count: what an UPDATE or DELETE changed, without `RETURNING` rows.
    static func execute(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        try await connection.query(query, logger: logger).get().metadata.rows ?? 0
    }

    static func rows(_ sequence: PostgresRowSequence) async throws -> [SQLRow] {
        var rows: [SQLRow] = []
        for try await row in sequence {
            rows.append(SQLRow(try row.map(SQLValue.init)))
        }
        return rows
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
