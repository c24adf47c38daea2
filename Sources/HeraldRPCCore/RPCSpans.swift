import HeraldModel
import HeraldTelemetry
import Tracing

/// The spans of RPCs, which the method table (server side) and the client open: the method, and on
/// failure its status code as the error ``ServiceError/from(_:)`` makes of it.
extension HeraldTracing {
    package static func isHealthCheck(_ method: String) -> Bool { method.hasPrefix("grpc.health.v1.") }

    /// The body of an RPC's span, client or server side: the method, and on failure its status code.
    package static func rpc<T>(_ span: HeraldSpan, method: String, _ body: () async throws -> T) async throws -> T {
        // A span that records nothing gets no attributes (each is a copy of the set under its lock).
        guard span.isRecording else { return try await body() }
        span.setAttribute("rpc.system", "grpc")
        span.setAttribute("rpc.method", method)
        do {
            return try await body()
        } catch {
            let code = ServiceError.from(error).error.code
            span.setAttribute("rpc.grpc.status_code", Int64(code.rawValue))
            span.setStatus(SpanStatus(code: .error, message: "\(code)"))
            throw error
        }
    }
}
