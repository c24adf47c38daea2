import Foundation
public import HeraldModel
public import Logging
import NIOSSL
public import PostgresNIO
public import ServiceLifecycle
import Synchronization

/// One service's PostgreSQL database: a connection pool whose every connection works in the
/// service's own schema, and the versioned migrations of that schema.
///
/// postgres-nio's pool needs a running task before any query; this type starts it when made (so a
/// definition can migrate while it builds its parts) and, as a lifecycle `Service` listed before
/// the listeners, stops it after they have drained.
public final class HeraldPostgres: Service, Sendable {
    public let client: PostgresClient
    public let schema: String
    public let location: DatabaseURL.PostgresLocation
    private let runner: Task<Void, Never>
    /// For the queries of requests. postgres-nio copies the logger and sets connection metadata
    /// on every query, and logs each at debug level: a no-op handler makes that nearly free.
    /// Start-up, migrations and the pool's background work log with the service's logger.
    public let logger = Logger(label: "herald.postgres", factory: { _ in SwiftLogNoOpLogHandler() })
    private let serviceLogger: Logger
    /// The statements the seam prepares on this pool's connections.
    let statements: PostgresStatements

    /// How long ``migrate(_:timeout:)`` waits for a first connection by default.
    public let connectWait: Duration

    /// `connectWait`: 30 s suits a service starting; a test process that sets up dozens of schemas
    /// at once on a two-core machine has seen a first connection take 26 s, and waits longer.
    /// `eventLoopGroup`: where the connections run; NIO's shared one unless a caller needs its
    /// queries answered apart from the process's other network work.
    public init(
        _ location: DatabaseURL.PostgresLocation, logger: Logger, maximumConnections: Int = 10,
        connectWait: Duration = .seconds(30), eventLoopGroup: (any EventLoopGroup)? = nil
    ) throws {
        var configuration: PostgresClient.Configuration
        switch location.address {
        case .tcp(let host, let port):
            let tls: PostgresClient.Configuration.TLS
            switch location.tls {
            case .disable: tls = .disable
            case .prefer, .require:
                var settings = TLSConfiguration.makeClientConfiguration()
                if let roots = location.rootCertificate { settings.trustRoots = .file(roots) }
                tls = location.tls == .require ? .require(settings) : .prefer(settings)
            }
            configuration = .init(
                host: host, port: port, username: location.user, password: location.password,
                database: location.database, tls: tls)
        case .unixSocket(let path):
            configuration = .init(
                unixSocketPath: path, username: location.user, password: location.password, database: location.database)
        }
        // Every connection starts in the service's schema: its SQL names tables unqualified, and no
        // service sees another's tables by accident. (A startup-packet parameter is a GUC.)
        configuration.options.additionalStartupParameters = [
            ("search_path", location.schema), ("application_name", "herald"),
        ]
        configuration.options.maximumConnections = maximumConnections
        configuration.options.connectTimeout = .seconds(5)
        let client = PostgresClient(
            configuration: configuration, eventLoopGroup: eventLoopGroup ?? PostgresClient.defaultEventLoopGroup,
            backgroundLogger: logger)
        self.client = client
        self.schema = location.schema
        self.location = location
        self.statements = PostgresStatements(capacity: location.statementCache)
        self.serviceLogger = logger
        self.connectWait = connectWait
        self.runner = Task { await client.run() }
    }

    deinit { runner.cancel() }

    /// Keeps the pool until graceful shutdown reaches this service, then closes it.
    public func run() async throws {
        await withTaskCancellationHandler {
            try? await gracefulShutdown()
        } onCancel: {
            runner.cancel()
        }
        runner.cancel()
        await runner.value
    }

    /// A query on a pooled connection, with PostgreSQL's own message when it fails.
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRowSequence {
        try await client.query(query, logger: logger)
    }

    /// All rows of a prepared statement: prepared once per connection, then only bound and run,
    /// for the reads every request makes.
    public func execute<Statement: PostgresPreparedStatement>(_ statement: Statement) async throws -> [Statement.Row]
    where Statement.Row: Sendable {
        var rows: [Statement.Row] = []
        for try await row in try await client.execute(statement, logger: logger) { rows.append(row) }
        return rows
    }

    /// All rows of `query`, collected.
    public func rows(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await client.query(query, logger: logger).collect()
    }

    /// Runs `body` in one transaction (rolled back when it throws).
    /// The body's own error comes out as itself (a NOT_FOUND stays a NOT_FOUND), not wrapped in
    /// postgres-nio's `PostgresTransactionError`, unless the rollback failed too.
    nonisolated(nonsending) public func transaction<Result: Sendable>(
        _ body: (PostgresConnection) async throws -> Result
    ) async throws
        -> Result
    {
        do {
            return try await client.withTransaction(logger: logger) { connection in try await body(connection) }
        } catch let error as PostgresTransactionError {
            if let bodyError = error.closureError, error.rollbackError == nil { throw bodyError }
            if let underlying = error.commitError ?? error.beginError ?? error.rollbackError { throw underlying }
            throw error
        }
    }

    /// Brings the schema up to `migrations`, in order, each in its own transaction.
    ///
    /// Replicas starting together take turns: the whole pass holds a session advisory lock keyed
    /// on the schema, so the second finds the first's work done. A database that has a migration
    /// this binary does not know was migrated by a newer Herald: refused, with its names, rather
    /// than served with a schema this code does not understand.
    ///
    /// `timeout` (``connectWait`` unless given) bounds getting a connection, not the migrations:
    /// the pool retries a server that does not answer, and start-up should say so instead of
    /// hanging; but once connected, an index built over a large table, or another replica's turn,
    /// takes what it takes.
    public func migrate(_ migrations: [PostgresMigration], timeout: Duration? = nil) async throws {
        let timeout = timeout ?? connectWait
        let connected = ConnectedFlag()
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await self.migrateNow(migrations) { connected.value.store(true, ordering: .releasing) }
                return true
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                guard connected.value.load(ordering: .acquiring) else {
                    throw ConfigError(
                        "\(DatabaseURL.postgres(self.location)) did not answer within \(timeout): is the server up and the URL right?"
                    )
                }
                return false
            }
            defer { group.cancelAll() }
            // The migrations' end, or the timer's error; a timer that finds a connection steps aside.
            while let migrated = try await group.next(), !migrated {}
        }
    }

    private func migrateNow(_ migrations: [PostgresMigration], connected: @Sendable () -> Void) async throws {
        let names = migrations.map(\.name)
        // trap-ok: migrations are a list in code, checked at start.
        precondition(Set(names).count == names.count, "duplicate migration names")
        let schema = self.schema
        let lockKey = "herald:\(schema)"
        try await client.withConnection { connection in
            connected()
            _ = try await connection.query("SELECT pg_advisory_lock(hashtext(\(lockKey)))", logger: serviceLogger)
            do {
                _ = try await connection.query(
                    PostgresQuery(unsafeSQL: "CREATE SCHEMA IF NOT EXISTS \(schema)"), logger: serviceLogger)
                _ = try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS herald_migrations (
                        name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())
                    """, logger: serviceLogger)
                var applied: Set<String> = []
                for try await name in try await connection.query(
                    "SELECT name FROM herald_migrations", logger: serviceLogger
                )
                .decode(String.self) {
                    applied.insert(name)
                }
                let unknown = applied.subtracting(names)
                guard unknown.isEmpty else {
                    throw ConfigError(
                        "schema \(schema) has migrations this binary does not know (\(unknown.sorted().joined(separator: ", "))): "
                            + "a newer Herald migrated it; run that version or newer")
                }
                for migration in migrations where !applied.contains(migration.name) {
                    try await connection.withTransaction(logger: serviceLogger) { connection in
                        for statement in migration.statements {
                            _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: serviceLogger)
                        }
                        _ = try await connection.query(
                            "INSERT INTO herald_migrations (name) VALUES (\(migration.name))", logger: serviceLogger)
                    }
                    serviceLogger.info(
                        "migrated", metadata: ["herald.schema": "\(schema)", "herald.migration": "\(migration.name)"])
                }
            } catch {
                _ = try? await connection.query(
                    "SELECT pg_advisory_unlock(hashtext(\(lockKey)))", logger: serviceLogger)
                throw error
            }
            _ = try await connection.query("SELECT pg_advisory_unlock(hashtext(\(lockKey)))", logger: serviceLogger)
        }
    }

    /// The health check: the database takes a write (a heartbeat row per schema).
    public var healthCheck: HealthCheck {
        HealthCheck("database") { [self] in
            try await query(
                """
                INSERT INTO herald_heartbeat (id, at) VALUES (1, \(unixMillis()))
                ON CONFLICT (id) DO UPDATE SET at = excluded.at
                """)
        }
    }

    /// The heartbeat table every service's schema gets with its first migration.
    static let heartbeatTable =
        "CREATE TABLE IF NOT EXISTS herald_heartbeat (id INTEGER PRIMARY KEY, at BIGINT NOT NULL)"
}

/// One step of a schema's history: its name (never changed once released) and its statements.
public struct PostgresMigration: Sendable {
    public let name: String
    public let statements: [String]

    public init(_ name: String, _ statements: [String]) {
        self.name = name
        self.statements = statements
    }

    /// The first migration of every schema: the health check's heartbeat table.
    public static let heartbeat = PostgresMigration("herald-heartbeat", [HeraldPostgres.heartbeatTable])
}

/// PostgreSQL's refusals as RPC statuses: a full disk is `storageFull` (the edge answers 507), a
/// database that cannot be reached is UNAVAILABLE (503, retried); the rest stay internal errors,
/// logged with PostgreSQL's message.
extension PSQLError: ServiceErrorConvertible {
    public var serviceError: ServiceError? {
        switch code {
        case .server:
            let state = serverInfo?[.sqlState] ?? ""
            if state == "53100" { return .storageFull }  // disk_full
            // 08: connection exceptions; 57P: operator intervention (shutdown, crash recovery).
            if state.hasPrefix("08") || state.hasPrefix("57P") || state == "53300" {
                return .unavailable("the database is unavailable (\(state)); retry")
            }
            return nil
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .poolClosed, .uncleanShutdown,
            .sslUnsupported:
            return .unavailable("the database is unavailable; retry")
        default:
            return nil
        }
    }

    /// What PostgreSQL said, for logs and start-up errors (postgres-nio's own description hides it).
    public var serverMessage: String {
        guard let info = serverInfo else { return "\(code)" }
        return "\(info[.severity] ?? "ERROR") \(info[.sqlState] ?? ""): \(info[.message] ?? "")"
    }
}

/// Set once ``HeraldPostgres/migrate(_:timeout:)`` holds a connection.
private final class ConnectedFlag: Sendable {
    let value = Atomic<Bool>(false)
}
