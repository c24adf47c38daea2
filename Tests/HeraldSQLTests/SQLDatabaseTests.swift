import Foundation
import GRDB
import HeraldModel
import HeraldSQL
import HeraldTestSupport
import Testing

/// The SQL seam every store is written over: one statement text for both dialects, values always
/// bound, transactions that commit or roll back as a whole on both databases.
@Suite("SQL seam", .watchedForStalls)
struct SQLDatabaseTests {
    @Test("a statement renders its placeholders and fragments per dialect; values are never spliced")
    func render() {
        let name = "x'); DROP TABLE t; --"
        let sql: SQLQuery = "SELECT a FROM t WHERE b = \(name) AND c IN (\(list: [1, 2])) LIMIT \(3) \(.skipLocked)"
        let sqlite = sql.render(.sqlite)
        #expect(sqlite.text == "SELECT a FROM t WHERE b = ? AND c IN (?, ?) LIMIT ? ")
        #expect(sqlite.values == [.text(name), .integer(1), .integer(2), .integer(3)])
        let postgres = sql.render(.postgres)
        #expect(postgres.text == "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3) LIMIT $4 FOR UPDATE SKIP LOCKED")
        #expect(postgres.values == sqlite.values)
    }

    static let schema = SQLSchema([
        SQLMigration(
            postgres: "t-v1", sqlite: "v1",
            [
                """
                CREATE TABLE t (
                    id \(.serialKey), n \(.int64) NOT NULL, name TEXT NOT NULL, data \(.bytes), flag \(.bool) NOT NULL
                )
                """
            ])
    ])

    @Test("each value type comes back as it went in, NULL included", arguments: StoreBackend.available)
    func roundTrip(_ backend: StoreBackend) async throws {
        try await TestDatabases.withDatabase(backend, service: "sqlseam") { db in
            try await db.migrate(Self.schema)
            let bytes: [UInt8] = [0, 1, 0xff]
            let ids = try await db.executeReturning(
                """
                INSERT INTO t (n, name, data, flag) VALUES (\(Int64.max), \("é'\""), \(bytes), \(true)),
                    (\(Int64.min), \(""), \(nil as [UInt8]?), \(false))
                RETURNING id
                """
            ).map { row -> Int64 in try row[0] }
            #expect(ids.count == 2 && ids[1] == ids[0] + 1)
            let rows = try await db.query("SELECT n, name, data, flag FROM t ORDER BY id")
            #expect(try rows[0][0] as Int64 == .max)
            #expect(try rows[0][1] as String == "é'\"")
            #expect(try rows[0][2] as [UInt8]? == bytes)
            #expect(try rows[0][3] as Bool == true)
            #expect(try rows[1][0] as Int64 == .min)
            #expect(try rows[1][2] as [UInt8]? == nil)
            #expect(try rows[1][3] as Bool == false)
            // A column of another type, or past the end, is an error, never a trap.
            #expect(throws: SQLDecodingError.self) { try rows[0][1] as Int64 }
            #expect(throws: SQLDecodingError.self) { try rows[0][9] as Int64 }
            #expect(try await db.execute("UPDATE t SET n = n + 0 WHERE flag = \(true) OR flag = \(false)") == 2)
        }
    }

    @Test(
        "a transaction commits as a whole, or rolls back as a whole with its own error",
        arguments: StoreBackend.available)
    func transactions(_ backend: StoreBackend) async throws {
        struct Refused: Error {}
        try await TestDatabases.withDatabase(backend, service: "sqlseam") { db in
            try await db.migrate(Self.schema)
            try await db.transaction { session in
                try await session.execute("INSERT INTO t (n, name, flag) VALUES (1, 'a', \(true))")
                // The transaction sees its own write.
                #expect(try await session.query("SELECT count(*) FROM t")[0][0] as Int64 == 1)
            }
            await #expect(throws: Refused.self) {
                try await db.transaction { session in
                    try await session.execute("INSERT INTO t (n, name, flag) VALUES (2, 'b', \(true))")
                    throw Refused()
                }
            }
            #expect(try await db.query("SELECT n FROM t").map { try $0[0] as Int64 } == [1])
            #expect(try await db.deleteAll(["t"]) == 1)
        }
    }

    @Test(
        "rows go in and update as a batch, in order, past a PostgreSQL chunk; anyOf matches a list of any length, empty included",
        arguments: StoreBackend.available)
    func rowSources(_ backend: StoreBackend) async throws {
        try await TestDatabases.withDatabase(backend, service: "sqlseam") { db in
            try await db.migrate(Self.schema)
            let count = SQLRowSource.chunk + 7
            let names = (0..<count).map { $0 == 3 ? "it's \"quoted\"\\\n\u{1}" : "r\($0)" }
            let rows = SQLRowSource(count: count)
                .integers("n", (0..<count).map { Int64($0) * 10 })
                .texts("name", names)
                .bytes("data", (0..<count).map { [UInt8(truncatingIfNeeded: $0), 0] })
                .bools("flag", (0..<count).map { $0.isMultiple(of: 2) })
            let inserted = try await db.executeReturning(
                "INSERT INTO t (n, name, data, flag) SELECT u.n, u.name, u.data, u.flag FROM \(rows: rows) \(SQLRowSource.inOrder) RETURNING id"
            )
            #expect(inserted.count == count)
            let read = try await db.query("SELECT n, name, data, flag FROM t ORDER BY id")
            #expect(try read.map { try $0[0] as Int64 } == (0..<count).map { Int64($0) * 10 })
            #expect(try read.map { try $0[1] as String } == names)
            #expect(try read[count - 1][2] as [UInt8] == [UInt8(truncatingIfNeeded: count - 1), 0])
            #expect(try read[1][3] as Bool == false && read[2][3] as Bool == true)

            // An update from rows answers, through RETURNING, only the rows it matched.
            let changes = SQLRowSource(count: 3).integers("n", [10, 20, 999]).texts("name", ["a", "b", "c"])
            let changed = try await db.transaction { session in
                try await session.executeReturning(
                    "UPDATE t SET name = u.name FROM \(rows: changes) WHERE t.n = u.n RETURNING t.n"
                ).map { try $0[0] as Int64 }
            }
            #expect(Set(changed) == [10, 20])
            #expect(
                try await db.query("SELECT name FROM t WHERE n \(anyOf: [10, 20] as [Int64]) ORDER BY n").map {
                    try $0[0] as String
                } == ["a", "b"])
            #expect(
                try await db.query("SELECT n FROM t WHERE name \(anyOf: [names[3], "b", "none"])").map {
                    try $0[0] as Int64
                }.sorted() == [20, 30])
            #expect(try await db.query("SELECT n FROM t WHERE n \(anyOf: [] as [Int64])").isEmpty)
            // A batch of no rows runs nothing.
            #expect(
                try await db.execute(
                    "INSERT INTO t (n, name, flag) SELECT u.n, 'x', \(true) FROM \(rows: SQLRowSource(count: 0).integers("n", []))"
                ) == 0)
        }
    }

    @Test("SQLite: concurrent read-modify-write transactions never lose an update")
    func serialised() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("herald-sql-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let db = SQLiteDatabase(
            try DatabasePool(
                path: folder.appendingPathComponent("t.sqlite").path, configuration: HeraldDatabase.configuration))
        try await db.migrate(Self.schema)
        try await db.execute("INSERT INTO t (n, name, flag) VALUES (0, 'counter', \(false))")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    try await db.transaction { session in
                        let n: Int64 = try await session.query("SELECT n FROM t")[0][0]
                        await Task.yield()
                        try await session.execute("UPDATE t SET n = \(n + 1)")
                    }
                }
                // Plain writes between them wait for the gate too.
                group.addTask { try await db.execute("UPDATE t SET name = 'counter'") }
            }
            try await group.waitForAll()
        }
        #expect(try await db.query("SELECT n FROM t")[0][0] as Int64 == 50)
    }

    @Test("a statement sent to the database inside its own transaction is an error, not a deadlock")
    func reentrant() async throws {
        let db = SQLiteDatabase(try DatabaseQueue(configuration: HeraldDatabase.configuration))
        try await db.migrate(Self.schema)
        await #expect(throws: ServiceError.self) {
            try await db.transaction { _ in try await db.execute("INSERT INTO t (n, name, flag) VALUES (1, 'a', 0)") }
        }
        #expect(try await db.query("SELECT count(*) FROM t")[0][0] as Int64 == 0)
    }

    @Test("deleteInBatches deletes in statements of at most the batch", arguments: StoreBackend.available)
    func batches(_ backend: StoreBackend) async throws {
        try await TestDatabases.withDatabase(backend, service: "sqlseam") { db in
            try await db.migrate(Self.schema)
            for n in 0..<25 { try await db.execute("INSERT INTO t (n, name, flag) VALUES (\(n), 'x', \(true))") }
            var statements = 0
            let deleted = try await db.deleteInBatches(batch: 10) {
                statements += 1
                return "DELETE FROM t WHERE id IN (SELECT id FROM t WHERE n >= \(5) LIMIT 10 \(.skipLocked))"
            }
            #expect(deleted == 20 && statements == 3)  // 10, 10, then 0: fewer than the batch
            #expect(try await db.query("SELECT count(*) FROM t")[0][0] as Int64 == 5)
        }
    }
}
