import HeraldModel
public import HeraldProto
import Synchronization

/// The `grpc.health.v1.Health` service of one process, over the same method table as its RPCs.
///
/// grpc-swift-2 ships no health service (it lives in grpc-swift-extras, which Herald does not use),
/// so Check and Watch are written here: a status per service name, "" standing for the whole server.
public final class HealthReporter: HealthHandler, DrainObserver {
    public typealias Status = HealthCheckResponse.ServingStatus

    private struct State {
        var statuses: [String: Status] = [:]
        var watchers: [Int: (service: String, continuation: AsyncStream<Status>.Continuation)] = [:]
        var nextWatcher = 0
        /// What must hold for the process to serve, by name: "listening", "draining", "database",
        /// "peer:<name>". Tracked services are SERVING exactly when every condition holds.
        var conditions: [String: Bool] = [:]
        var tracked: [String] = []
        var draining: Bool { conditions["draining"] == false }
    }

    private let state = Mutex(State())

    public init() {}

    /// Sets the status of `service` ("" for the whole server) and tells every watcher of it.
    public func set(_ service: String, _ status: Status) {
        let watchers = state.withLock { state in
            state.statuses[service] = status
            return state.watchers.values.filter { $0.service == service }.map(\.continuation)
        }
        for watcher in watchers { watcher.yield(status) }
    }

    /// Reports `services` ("" for the whole server) from the conditions: SERVING when every
    /// condition holds, NOT_SERVING otherwise.
    public func track(_ services: [String]) {
        state.withLock { $0.tracked = services }
        recompute()
    }

    /// Records whether condition `name` holds; returns what it was before (nil: never set). Draining
    /// is final: once ``beginDraining()`` ran, nothing makes the process SERVING again.
    @discardableResult
    public func setCondition(_ name: String, _ holds: Bool) -> Bool? {
        let old = state.withLock { state in
            let old = state.conditions[name]
            state.conditions[name] = holds
            return old
        }
        recompute()
        return old
    }

    /// NOT_SERVING for good: the process is shutting down. Every Watch stream gets NOT_SERVING and
    /// then ends, so open watches never hold up the drain.
    public func beginDraining() {
        setCondition("draining", false)
        let watchers = state.withLock { $0.watchers.values.map(\.continuation) }
        for watcher in watchers { watcher.finish() }
    }

    /// The conditions that do not hold, for logs and tests.
    public var failingConditions: [String] {
        state.withLock { $0.conditions.filter { !$0.value }.map(\.key).sorted() }
    }

    private func recompute() {
        let (tracked, serving) = state.withLock { state in
            (state.tracked, state.conditions.values.allSatisfy { $0 })
        }
        for service in tracked { set(service, serving ? .serving : .notServing) }
    }

    /// The current status, nil for a service this process does not serve.
    public func status(of service: String) -> Status? {
        state.withLock { $0.statuses[service] }
    }

    public func check(_ request: HealthCheckRequest, context: RPCContext) async throws -> HealthCheckResponse {
        guard let status = status(of: request.service) else {
            throw ServiceError.notFound("unknown service \"\(request.service)\"")
        }
        return HealthCheckResponse(status: status)
    }

    public func watch(
        _ request: HealthCheckRequest, context: RPCContext, responses: ResponseStream<HealthCheckResponse>
    ) async throws {
        let (updates, continuation) = AsyncStream<Status>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { state in
            let id = state.nextWatcher
            state.nextWatcher += 1
            state.watchers[id] = (request.service, continuation)
            if state.draining { continuation.finish() }
            return id
        }
        defer { _ = state.withLock { $0.watchers.removeValue(forKey: id) } }
        var last = status(of: request.service) ?? .serviceUnknown
        try await responses.send(HealthCheckResponse(status: last))
        for await status in updates where status != last {
            last = status
            try await responses.send(HealthCheckResponse(status: status))
        }
    }
}
