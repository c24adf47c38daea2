import HeraldModel
import HeraldRPC
public import Logging
public import ServiceLifecycle

/// Runs `body` every `interval` until graceful shutdown: housekeeping such as purging expired rows.
///
/// A failing run is logged and retried at the next tick; it never stops the process.
public struct Periodic: Service {
    public let name: String
    public let interval: Duration
    public let logger: Logger
    public let body: @Sendable () async throws -> Void

    public init(
        _ name: String, every interval: Duration, logger: Logger, _ body: @escaping @Sendable () async throws -> Void
    ) {
        self.name = name
        self.interval = interval
        self.logger = logger
        self.body = body
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await body()
                } catch is CancellationError {
                    return
                } catch {
                    logger.warning("\(name) failed", metadata: ["herald.error": "\(error)"])
                }
                do { try await Task.sleep(for: interval) } catch { return }
            }
        }
    }
}
