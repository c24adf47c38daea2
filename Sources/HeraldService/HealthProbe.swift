import HeraldModel
import HeraldRPC
public import Logging
public import ServiceLifecycle

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
