public import GRDB
import HeraldModel
import HeraldRPC
public import Logging
public import ServiceLifecycle

/// One condition a service's health depends on, checked by ``HealthProbe``: it passes when `run`
/// returns and fails when it throws (the error is logged).
public struct HealthCheck: Sendable {
    public let name: String
    public let run: @Sendable () async throws -> Void

    public init(_ name: String, _ run: @escaping @Sendable () async throws -> Void) {
        self.name = name
        self.run = run
    }

    /// The database takes a write: a heartbeat row in a table of its own. Fails while the file or
    /// its WAL cannot be written (read-only file, full disk, I/O error) or the write lock is held
    /// past the busy timeout.
    public static func database(_ db: any DatabaseWriter) -> HealthCheck {
        HealthCheck("database") {
            try await db.write { db in
                try db.execute(
                    sql: "CREATE TABLE IF NOT EXISTS herald_heartbeat (id INTEGER PRIMARY KEY, at INTEGER NOT NULL)")
                try db.execute(
                    sql: "INSERT OR REPLACE INTO herald_heartbeat (id, at) VALUES (1, ?)", arguments: [unixMillis()])
            }
        }
    }
}

/// Re-checks a service's ``HealthCheck``s every `interval` and sets its health conditions: a
/// failing check makes the service NOT_SERVING (grpc.health.v1, so load balancers and
/// `--check-health` see it) until it passes again. Logs each change once, not each tick.
public struct HealthProbe: Service {
    let health: HealthReporter
    let checks: [HealthCheck]
    let interval: Duration
    let logger: Logger

    public init(health: HealthReporter, checks: [HealthCheck], interval: Duration, logger: Logger) {
        self.health = health
        self.checks = checks
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        try await Periodic("health probe", every: interval, logger: logger) {
            await withTaskGroup(of: Void.self) { group in
                for check in checks {
                    group.addTask { await probe(check) }
                }
            }
        }.run()
    }

    private func probe(_ check: HealthCheck) async {
        do {
            try await check.run()
            if health.setCondition(check.name, true) == false {
                logger.notice("health check passes again", metadata: ["herald.check": "\(check.name)"])
            }
        } catch is CancellationError {
            return
        } catch {
            if health.setCondition(check.name, false) != false {
                logger.warning(
                    "health check failed: NOT_SERVING",
                    metadata: ["herald.check": "\(check.name)", "herald.error": "\(error)"])
            }
        }
    }
}
