import Foundation
import HTTPTypes
import HeraldTelemetry
import Hummingbird
import Tracing

/// A span per request when tracing is on, and nothing to pay for a request whose trace is not
/// sampled.
///
/// The sampling decision is taken first (``HeraldTracer/entering(traceparent:tracestate:in:)``):
/// - a sampled request gets a server span, written here rather than by Hummingbird's
///   `TracingMiddleware`, with the same attributes (`http.request.method`, `url.path`, `url.query`
///   with the tutorial's `handle` redacted, `user_agent.original`, `http.request.body.size`,
///   `http.route`, `http.response.status_code`, `http.response.body.size`) and name (the route).
///   Hummingbird's builds its attributes through `Span.updateAttributes`, an extension on the
///   protocol that copies the whole set twice per change, and wraps the response body to end the
///   span once written: about a quarter of what a sampled GET cost in the edge (callgrind). This
///   span ends when the response is ready; the edge's bodies are in memory by then.
/// - any other gets no span, only its trace passed on (the caller's `traceparent` as it arrived,
///   or a new unsampled root's) for the RPCs below to send, so no service starts a trace of its own.
///
/// It runs the edge's error middleware itself (``EdgeErrorMiddleware/serve(_:context:span:next:)``)
/// rather than as the next middleware of the chain: one middleware frame less on every request, and
/// the client's address goes on the span without a look-up of the task's context.
struct EdgeTracingMiddleware: RouterMiddleware {
    let tracer: HeraldTracer
    let errors: EdgeErrorMiddleware

    func handle(
        _ request: Request, context: EdgeRequestContext, next: (Request, EdgeRequestContext) async throws -> Response
    ) async throws -> Response {
        let entering = tracer.entering(
            traceparent: request.headers.value(.traceParent), tracestate: request.headers.value(.traceState),
            in: InstrumentationContext.current ?? .topLevel)
        return try await HeraldTracing.run(entering) { trace in
            try await recorded(request, context: context, trace: trace, next: next)
        } passOn: {
            try await errors.serve(request, context: context, span: nil, next: next)
        }
    }

    nonisolated(nonsending) private func recorded(
        _ request: Request, context: EdgeRequestContext, trace: InstrumentationContext,
        next: (Request, EdgeRequestContext) async throws -> Response
    ) async throws -> Response {
        let span = tracer.startSpan(
            "HTTP \(request.method.rawValue) route not found", context: trace, ofKind: .server,
            at: DefaultTracerClock.now, function: #function, file: #fileID, line: #line)
        span.updateInPlace { attributes in
            attributes["http.request.method"] = request.method.rawValue
            attributes["url.path"] = request.uri.path
            if let query = request.uri.query { attributes["url.query"] = Self.redacted(query) }
            attributes["user_agent.original"] = request.headers.value(.userAgent)
            attributes["http.request.body.size"] = request.headers.value(.contentLength).flatMap { Int($0) }
        }
        /// The route, as the span's name and attribute, and the answer's status (and size).
        func answered(status: Int, bodySize: Int?) {
            if let route = context.endpointPath { span.operationName = route }
            span.updateInPlace { attributes in
                attributes["http.route"] = context.endpointPath
                attributes["http.response.status_code"] = status
                attributes["http.response.body.size"] = bodySize
            }
        }
        do {
            let response = try await InstrumentationContext.$current.withValue(span.context) {
                try await errors.serve(request, context: context, span: span, next: next)
            }
            answered(status: Int(response.status.code), bodySize: response.body.contentLength)
            span.end()
            return response
        } catch {
            // The error middleware answers every error itself; this is what escapes it (cancellation).
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            answered(status: status, bodySize: nil)
            if 500..<600 ~= status { span.setStatus(SpanStatus(code: .error)) }
            span.recordError(error)
            span.end()
            throw error
        }
    }

    /// A query with the device handle of the tutorial's `?handle=` redacted, as Hummingbird's
    /// middleware wrote it (`handle=REDACTED`; other parameters as they came).
    /// A name written with percent escapes (`hand%6Ce`) is the same parameter to the router.
    static func redacted(_ query: String) -> String {
        guard query.contains("handle") || query.contains("%") else { return query }
        return query.split(separator: "&", omittingEmptySubsequences: false).map { part in
            let key = String(part.prefix { $0 != "=" })
            let name = key.contains("%") ? (key.removingPercentEncoding ?? key) : key
            return name == "handle" ? "handle=REDACTED" : String(part)
        }.joined(separator: "&")
    }
}
