/// Told when a server begins its graceful shutdown, before its listener closes: the process's
/// health (`HealthReporter` in HeraldRPC) turns NOT_SERVING, so callers that watch it move away
/// while in-flight calls finish. A transport knows only this, not the health service.
public protocol DrainObserver: Sendable {
    func beginDraining()
}
