import HeraldModel
import HeraldTestSupport
import Logging
import PostgresNIO
import Testing

@testable import HeraldSQL

/// The seam prepares its statements on PostgreSQL: each text once per connection, by
/// the types bound to it, up to the pool's `statement_cache`; a failed preparation is not kept.
@Suite(
    "PostgreSQL: prepared statements",
    .enabled(if: TestDatabases.postgresURL != nil, "needs HERALD_TEST_POSTGRES_URL"), .watchedForStalls)
struct PostgresStatementsTests {
    /// Runs `body` with a pool of one connection (so that what it prepared can be read back) in a
    /// fresh schema holding SQLDatabaseTests' table, then drops the schema.
    static func withOneConnection(
        statementCache: Int, _ body: (HeraldPostgres) async throws -> Void
    ) async throws {
        let base = try #require(TestDatabases.freshPostgresURL(service: "statements"))
        guard case .postgres(let location) = try DatabaseURL(base + "&statement_cache=\(statementCache)", service: "x")
        else { throw ConfigError("not postgres") }
        let database = try HeraldPostgres(
            location, logger: Logger(label: "test-postgres"), maximumConnections: 1,
            connectWait: TestDatabases.connectWait)
        do {
            try await database.sql.migrate(SQLDatabaseTests.schema)
            try await body(database)
        } catch {
            try? await database.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \(location.schema) CASCADE"))
            throw error
        }
        try await database.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \(location.schema) CASCADE"))
    }

    /// What the pool's one connection has prepared: name → text.
    static func prepared(_ database: HeraldPostgres) async throws -> [String: String] {
        var found: [String: String] = [:]
        for row in try await database.rows(
            PostgresQuery(unsafeSQL: "SELECT name, statement FROM pg_prepared_statements"))
        {
            let (name, text) = try row.decode((String, String).self)
            found[name] = text
        }
        return found
    }

    @Test(
        "each text is prepared once per connection and run by name after that; a NULL makes another statement; past the cache, texts run unprepared"
    )
    func preparesOnce() async throws {
        try await Self.withOneConnection(statementCache: 3) { database in
            let db = database.sql
            try await db.execute("INSERT INTO t (n, name, flag) VALUES (\(Int64(7)), \("a"), \(true))")
            for _ in 0..<3 {
                #expect(
                    try await db.query("SELECT name FROM t WHERE n = \(Int64(7))").map { try $0[0] as String } == ["a"])
            }
            let none: [UInt8]? = nil
            let withNull = try await db.query("SELECT count(*) FROM t WHERE data IS NOT DISTINCT FROM \(none)")
            #expect(try withNull[0][0] as Int64 == 1)
            // The fourth text (the same text with bytes where the NULL was): past the cache of three.
            let withBytes = try await db.query("SELECT count(*) FROM t WHERE data IS NOT DISTINCT FROM \([UInt8(1)])")
            #expect(try withBytes[0][0] as Int64 == 0)
            // Past the cache: unprepared, its count read from the command tag.
            let updated = try await db.execute("UPDATE t SET n = n + \(Int64(1))")
            #expect(updated == 1)

            let prepared = try await Self.prepared(database)
            #expect(Set(prepared.keys) == ["herald_1", "herald_2", "herald_3"])
            // A statement run for what it changed is prepared as a query of that count.
            #expect(
                prepared["herald_1"]
                    == "WITH herald_changed AS (INSERT INTO t (n, name, flag) VALUES ($1, $2, $3) RETURNING 1) SELECT count(*) FROM herald_changed"
            )
            #expect(prepared["herald_2"] == "SELECT name FROM t WHERE n = $1")
            #expect(prepared["herald_3"] == "SELECT count(*) FROM t WHERE data IS NOT DISTINCT FROM $1")
            #expect(database.statements.named == 3)
        }
    }

    @Test(
        "INSERT, UPDATE and DELETE prepared say how many rows they changed, as their command tag does; other statements run unprepared"
    )
    func counts() async throws {
        #expect(PostgresStatements.counting("\n  UPDATE t SET n = 1") != nil)
        #expect(PostgresStatements.counting("delete FROM t") != nil)
        #expect(PostgresStatements.counting("INSERT INTO t (n) VALUES (1) RETURNING id") == nil)
        #expect(PostgresStatements.counting("SELECT pg_advisory_xact_lock(1)") == nil)
        #expect(PostgresStatements.counting("WITH x AS (SELECT 1) DELETE FROM t") == nil)
        try await Self.withOneConnection(statementCache: 10) { database in
            let db = database.sql
            var changed: [Int] = []
            for n in Int64(1)...3 {
                changed.append(try await db.execute("INSERT INTO t (n, name, flag) VALUES (\(n), \("x"), \(true))"))
            }
            changed.append(try await db.execute("UPDATE t SET flag = \(false) WHERE n >= \(Int64(2))"))
            changed.append(try await db.execute("UPDATE t SET flag = \(false) WHERE n > \(Int64(9))"))
            changed.append(try await db.execute("DELETE FROM t WHERE n \(anyOf: [Int64(1), 3, 4])"))
            changed.append(try await db.execute("SELECT pg_advisory_xact_lock(\(Int64(1)))"))
            #expect(changed == [1, 1, 1, 2, 0, 2, 1])
            let prepared = try await Self.prepared(database)
            // The INSERT, two UPDATEs and the DELETE; the lock's SELECT unprepared.
            #expect(prepared.count == 4)
            #expect(prepared.values.allSatisfy { $0.hasPrefix("WITH herald_changed AS (") })
        }
    }

    @Test("statement_cache=0: nothing is prepared")
    func unprepared() async throws {
        try await Self.withOneConnection(statementCache: 0) { database in
            try await database.sql.execute("INSERT INTO t (n, name, flag) VALUES (\(Int64(7)), \("a"), \(true))")
            let n: Int64 = try await database.sql.query("SELECT n FROM t")[0][0]
            #expect(n == 7)
            let prepared = try await Self.prepared(database)
            #expect(prepared.isEmpty)
        }
    }

    @Test(
        "a text whose preparation failed (in a transaction already aborted) is prepared again, under a new name, when next run"
    )
    func failedPreparation() async throws {
        struct Aborted: Error {}
        try await Self.withOneConnection(statementCache: 10) { database in
            let db = database.sql
            var failures: [String] = []
            do {
                try await db.transaction { session in
                    do { _ = try await session.query("SELECT * FROM nowhere") } catch { failures.append("\(error)") }
                    // The transaction is aborted: this text's first preparation fails (25P02).
                    do { _ = try await session.query("SELECT count(*) FROM t") } catch { failures.append("\(error)") }
                    throw Aborted()
                }
            } catch is Aborted {}
            #expect(failures.count == 2)
            // postgres-nio keeps that failure for the name it was prepared under; the seam moved
            // the text to another name, which prepares now.
            let count: Int64 = try await db.query("SELECT count(*) FROM t")[0][0]
            #expect(count == 0)
            let prepared = try await Self.prepared(database)
            #expect(prepared["herald_2_1"] == "SELECT count(*) FROM t")
            #expect(prepared["herald_2"] == nil)
        }
    }
}

/// The statement registry alone, without a server.
@Suite("PostgreSQL: the statements a pool remembers", .watchedForStalls)
struct PostgresStatementsBoundTests {
    @Test("every text remembered counts against the cache, those that run unprepared too; names are kept per text")
    func bounded() {
        let statements = PostgresStatements(capacity: 2)
        func statement(_ text: String, counting: Bool) -> SeamStatement.Current? {
            statements.statement(
                PostgresStatements.key(text, [.integer(1)], counting: counting), text: text, counting: counting)
        }
        // An execute that cannot be counted runs unprepared, and is remembered as such.
        #expect(statement("SELECT pg_advisory_xact_lock($1)", counting: true) == nil)
        #expect(statement("SELECT n FROM t WHERE n = $1", counting: false)?.name == "herald_1")
        #expect(statement("SELECT n FROM t WHERE n = $1", counting: false)?.name == "herald_1")
        // The cache is full: however many other texts come, none is remembered.
        for n in 0..<100 { #expect(statement("SELECT \(n) FROM t WHERE n = $1", counting: false) == nil) }
        #expect(statements.named == 1)
        #expect(PostgresStatements(capacity: 0).statement("k", text: "SELECT 1", counting: false) == nil)
    }
}
