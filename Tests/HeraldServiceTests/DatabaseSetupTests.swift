import Foundation
import GRDB
import HeraldModel
import HeraldSQL
import HeraldService
import HeraldTestSupport
import PostgresNIO
import Testing

@Suite("database-url and migrations", .watchedForStalls)
struct DatabaseSetupTests {
    @Test(
        "database-url: sqlite paths, postgres over TCP and over a Unix socket, with the password kept out of messages")
    func parsing() throws {
        #expect(
            try DatabaseURL("sqlite:/var/lib/herald/payload.sqlite", service: "payload")
                == .sqlite(path: "/var/lib/herald/payload.sqlite"))
        guard
            case .postgres(let tcp) = try DatabaseURL(
                "postgres://herald:s3cret@db.example:6432/push?sslmode=require", service: "auth")
        else {
            Issue.record("not postgres")
            return
        }
        #expect(tcp.address == .tcp(host: "db.example", port: 6432) && tcp.user == "herald" && tcp.password == "s3cret")
        #expect(tcp.database == "push" && tcp.schema == "herald_auth" && tcp.tls == .require)
        #expect(!"\(DatabaseURL.postgres(tcp))".contains("s3cret"))
        guard
            case .postgres(let socket) = try DatabaseURL(
                "postgresql://herald@/push?host=/run/postgresql&schema=team_a", service: "payload")
        else {
            Issue.record("not postgres")
            return
        }
        #expect(
            socket.address == .unixSocket(path: "/run/postgresql/.s.PGSQL.5432") && socket.schema == "team_a"
                && socket.tls == .disable)
        #expect(try DatabaseURL("postgres://u@h/d", service: "x") != DatabaseURL("postgres://u@h/e", service: "x"))
        #expect(tcp.statementCache == 256)
        guard case .postgres(let unprepared) = try DatabaseURL("postgres://u@h/d?statement_cache=0", service: "x")
        else {
            Issue.record("not postgres")
            return
        }
        #expect(unprepared.statementCache == 0)
        for bad in [
            "mysql://u@h/d", "postgres://h/d", "postgres://u@h/", "postgres://u@h/d?schema=Drop;Table",
            "postgres://u@h/d?sslmode=maybe",
            "postgres://u@h/d?pool=3", "postgres://u@h:0/d", "sqlite:", "postgres://u@h/d?statement_cache=-1",
            "postgres://u@h/d?statement_cache=many", "postgres://u@h/d?statement_cache=10001",
            "postgres://u@h/d?statement_cache=99999999999999999999", "postgres://u@h/d?statement_cache=%2010",
        ] {
            #expect(throws: ConfigError.self, "\(bad)") { try DatabaseURL(bad, service: "payload") }
        }
        #expect {
            try DatabaseURL("postgres://u:hunter2@h/d?sslmode=nope", service: "x")
        } throws: { !"\($0)".contains("hunter2") }
    }

    @Test("database-url defaults to the service's SQLite file, and takes a postgres URL")
    func runtimeConfig() throws {
        let plain = try RuntimeConfig(
            service: "dispatch", peers: [], reader: ConfigReader(arguments: ["--data-dir", "/srv/h"]))
        #expect(plain.databaseURL == .sqlite(path: "/srv/h/dispatch.sqlite"))
        let postgres = try RuntimeConfig(
            service: "dispatch", peers: [],
            reader: ConfigReader(arguments: ["--database-url", "postgres://herald@db/herald"]))
        #expect(postgres.databaseURL.isPostgres)
    }

    @Test("SQLite: a database migrated by a newer binary is refused with the unknown migrations' names")
    func sqliteNewerSchema() throws {
        let db = try DatabaseQueue()
        var newer = DatabaseMigrator()
        newer.registerMigration("v1") { try $0.execute(sql: "CREATE TABLE a (id INTEGER)") }
        newer.registerMigration("v2") { try $0.execute(sql: "CREATE TABLE b (id INTEGER)") }
        try HeraldDatabase.migrate(newer, db)
        var older = DatabaseMigrator()
        older.registerMigration("v1") { try $0.execute(sql: "CREATE TABLE a (id INTEGER)") }
        #expect { try HeraldDatabase.migrate(older, db) } throws: {
            "\($0)".contains("(v2)") && "\($0)".contains("newer")
        }
        try HeraldDatabase.migrate(newer, db)  // the same version again is fine
    }

    @Test(
        "PostgreSQL: replicas migrating together take turns; a schema from a newer binary is refused",
        .enabled(if: TestDatabases.postgresURL != nil, "needs HERALD_TEST_POSTGRES_URL"))
    func postgresMigrations() async throws {
        try await TestDatabases.withPostgres(service: "migrations") { db in
            let url = try #require(TestDatabases.postgresURL) + "&schema=\(db.schema)"
            guard case .postgres(let location) = try DatabaseURL(url, service: "migrations") else { return }
            // Not idempotent on purpose: two passes racing would fail on CREATE TABLE.
            let steps = [
                PostgresMigration.heartbeat, PostgresMigration("v1", ["CREATE TABLE a (id BIGINT)"]),
                PostgresMigration("v2", ["CREATE TABLE b (id BIGINT)", "INSERT INTO b VALUES (1)"]),
            ]
            let replicas = try (0..<4).map { _ in
                try HeraldPostgres(
                    location, logger: .init(label: "test"), maximumConnections: 2,
                    connectWait: TestDatabases.connectWait)
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for replica in replicas { group.addTask { try await replica.migrate(steps) } }
                try await group.waitForAll()
            }
            let count = try await db.rows("SELECT count(*) FROM b").first?.decode(Int64.self)
            #expect(count == 1)
            await #expect {
                try await db.migrate(Array(steps.prefix(2)))
            } throws: { "\($0)".contains("(v2)") && "\($0)".contains("newer") }
            try await db.healthCheck.run()
        }
    }

    @Test(
        "PostgreSQL: the timeout bounds the first connection, not the migrations, which take what they take",
        .enabled(if: TestDatabases.postgresURL != nil, "needs HERALD_TEST_POSTGRES_URL"))
    func postgresSlowMigration() async throws {
        try await TestDatabases.withPostgres(service: "slow") { db in
            // A connection first, which the pool keeps: in CI's first pass a new one can take
            // seconds to open, and what this checks is the bound once one is there.
            _ = try await db.rows("SELECT 1")
            try await db.migrate(
                [.heartbeat, PostgresMigration("slow", ["SELECT pg_sleep(4)", "CREATE TABLE done (id BIGINT)"])],
                timeout: .seconds(2))
            #expect(try await db.rows("SELECT count(*) FROM done").first?.decode(Int64.self) == 0)
        }
    }

    @Test("PostgreSQL: a server that does not answer fails start-up within the timeout, naming the URL")
    func postgresUnreachable() async throws {
        guard
            case .postgres(let location) = try DatabaseURL(
                "postgres://herald@/herald?host=/nonexistent-herald", service: "payload")
        else { return }
        let db = try HeraldPostgres(location, logger: .init(label: "test"))
        await #expect {
            try await db.migrate([.heartbeat], timeout: .seconds(1))
        } throws: { "\($0)".contains("did not answer") && "\($0)".contains("/nonexistent-herald") }
    }
}
