import HTTPTypes
import HeraldTelemetry
import Hummingbird
import Tracing

/// A span per request when tracing is on, and nothing to pay for a request whose trace is not
/// sampled.
///
/// Hummingbird's `TracingMiddleware` starts a span for every request and computes its attributes
/// (method, path, query, user agent, peer address) before it knows whether the span records:
/// `updateAttributes` is an extension on `Span`, which a tracer cannot skip. At 1% sampling that
/// was about a quarter of the extra instructions of an edge GET, for spans thrown away (callgrind,
/// docs/performance.md). So the sampling decision is taken here first
/// (``HeraldTracer/entering(traceparent:tracestate:in:)``):
/// - a sampled request goes through Hummingbird's middleware, which records its span as before
///   (a new trace's span takes the trace id decided here);
/// - any other gets no span, only its trace passed on (the caller's `traceparent` as it arrived,
///   or a new unsampled root's) for the RPCs below to send, so no service starts a trace of its own.
///
/// It runs the edge's error middleware itself (``EdgeErrorMiddleware/serve(_:context:recording:next:)``)
/// rather than as the next middleware of the chain: one middleware frame less on every request, and
/// the error middleware knows whether the span records without asking the task-local context.
struct EdgeTracingMiddleware: RouterMiddleware {
    let tracer: HeraldTracer
    let errors: EdgeErrorMiddleware
    /// The device handle in the tutorial's `?handle=` stays out of the trace.
    let recorded = TracingMiddleware<EdgeRequestContext>(redactingQueryParameters: ["handle"])

    func handle(
        _ request: Request, context: EdgeRequestContext, next: (Request, EdgeRequestContext) async throws -> Response
    ) async throws -> Response {
        let entering = tracer.entering(
            traceparent: request.headers.value(.traceParent), tracestate: request.headers.value(.traceState),
            in: InstrumentationContext.current ?? .topLevel)
        return try await HeraldTracing.run(entering) { trace in
            // Hummingbird's middleware starts its span in the task's current context.
            try await InstrumentationContext.$current.withValue(trace) {
                try await recorded.handle(request, context: context) { request, context in
                    try await errors.serve(request, context: context, recording: true, next: next)
                }
            }
        } passOn: {
            try await errors.serve(request, context: context, recording: false, next: next)
        }
    }
}
