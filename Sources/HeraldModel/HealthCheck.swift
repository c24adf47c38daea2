/// One condition a service's health depends on, checked by HeraldService's `HealthProbe`: it passes when `run`
/// returns and fails when it throws (the error is logged).
public struct HealthCheck: Sendable {
    public let name: String
    public let run: @Sendable () async throws -> Void

    public init(_ name: String, _ run: @escaping @Sendable () async throws -> Void) {
        self.name = name
        self.run = run
    }
}
