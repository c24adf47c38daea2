import Foundation
import GRDB
import HeraldModel
public import HeraldSQL
import Logging
import PostgresNIO

/// Which store a test runs against. PostgreSQL is there when `HERALD_TEST_POSTGRES_URL` names a
/// server (scripts/test.sh starts a throw-away cluster and sets it); without it, SQLite only.
public enum StoreBackend: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite, postgres

    public var description: String { rawValue }

    /// SQLite always; PostgreSQL when the test run has one.
    public static var available: [StoreBackend] { TestDatabases.postgresURL == nil ? [.sqlite] : [.sqlite, .postgres] }
}

public enum TestDatabases {
    /// `HERALD_TEST_POSTGRES_URL`, e.g. `postgres://herald@/herald?host=/tmp/pg-XXXX&port=5432`.
    public static var postgresURL: String? {
        guard let url = ProcessInfo.processInfo.environment["HERALD_TEST_POSTGRES_URL"], !url.isEmpty else {
            return nil
        }
        return url
    }

    /// How long a test's pool waits for its first connection (``HeraldPostgres/connectWait``): the
    /// unit tests set up dozens of schemas at once beside the integration tests' stacks, and a first
    /// connection took 26 s in such a run (the pool retrying connects that timed out).
    public static let connectWait = Duration.seconds(300)

    /// A database URL whose schema no other test uses: `t<random>_<service>`.
    public static func freshPostgresURL(service: String, prefix: String = freshPrefix()) -> String? {
        guard let base = postgresURL else { return nil }
        return base + (base.contains("?") ? "&" : "?") + "schema=\(prefix)_\(service)"
    }

    /// A schema-name prefix no other test uses.
    public static func freshPrefix() -> String {
        "t" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
    }

    /// Runs `body` with an empty database of `backend`: SQLite in memory, or PostgreSQL in a fresh
    /// schema (dropped afterwards).
    public static func withDatabase<T: Sendable>(
        _ backend: StoreBackend, service: String, _ body: (any SQLDatabase) async throws -> T
    ) async throws -> T {
        switch backend {
        case .sqlite: try await body(try SQLiteDatabase.inMemory())
        case .postgres: try await withPostgres(service: service) { try await body($0.sql) }
        }
    }

    /// Runs `body` with a database in a fresh schema, then drops the schema.
    public static func withPostgres<T: Sendable>(
        service: String, _ body: (HeraldPostgres) async throws -> T
    ) async throws -> T {
        guard let url = freshPostgresURL(service: service),
            case .postgres(let location) = try DatabaseURL(url, service: service)
        else { throw ConfigError("HERALD_TEST_POSTGRES_URL is not set") }
        let database = try HeraldPostgres(
            location, logger: Logger(label: "test-postgres"), maximumConnections: 4, connectWait: connectWait)
        do {
            let result = try await body(database)
            try await database.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \(location.schema) CASCADE"))
            return result
        } catch {
            try? await database.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \(location.schema) CASCADE"))
            throw error
        }
    }
}

extension SQLiteDatabase {
    /// A database in memory, configured as the services' files are.
    public static func inMemory() throws -> SQLiteDatabase {
        SQLiteDatabase(try DatabaseQueue(configuration: HeraldDatabase.configuration))
    }
}

/// A new folder under the temporary directory, removed after `body`: a keyring's, a data folder.
public func withTemporaryFolder<T>(_ prefix: String = "herald", _ body: (String) async throws -> T) async rethrows -> T
{
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: folder) }
    return try await body(folder)
}
