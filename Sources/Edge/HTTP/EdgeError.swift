import Foundation
public import HTTPTypes
public import HeraldModel
import HeraldRPC
import HeraldService
import HeraldTelemetry
import Hummingbird
import Metrics

/// An HTTP error answer: a status and a JSON body `{"error": "<word>", "message": "<sentence>"}`.
public struct EdgeError: Error, Sendable {
    public var status: HTTPResponse.Status
    public var message: String
    public var headers: HTTPFields

    public init(_ status: HTTPResponse.Status, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.message = message
        self.headers = headers
    }

    /// 401 with the `WWW-Authenticate` challenge every tutorial client understands.
    public static func unauthorized(_ message: String) -> EdgeError {
        EdgeError(.unauthorized, message, headers: [.wwwAuthenticate: #"Basic realm="herald""#])
    }

    /// The one mapping from an RPC status to HTTP. Routes with a contract-specific answer (410 for
    /// PUT api/register) catch their case before it gets here.
    public static func from(_ error: ServiceError) -> EdgeError {
        if error.isStorageFull {
            return EdgeError(
                .init(code: 507, reasonPhrase: "Insufficient Storage"), error.message, headers: [.retryAfter: "30"])
        }
        if error.isQuotaExceeded { return EdgeError(.forbidden, error.message) }
        return switch error.code {
        case .unauthenticated: .unauthorized(error.message)
        case .invalidArgument, .outOfRange, .failedPrecondition: EdgeError(.badRequest, error.message)
        case .notFound: EdgeError(.notFound, error.message)
        case .permissionDenied: EdgeError(.forbidden, error.message)
        case .alreadyExists, .aborted: EdgeError(.conflict, error.message)
        case .resourceExhausted:
            // Rate limits (herald-auth's lockout); routes that store content answer 413 themselves.
            EdgeError(
                .tooManyRequests, error.message,
                headers: error.retryAfterSeconds.map { [.retryAfter: String($0)] } ?? [:])
        case .unimplemented: EdgeError(.notImplemented, error.message)
        case .unavailable, .deadlineExceeded, .cancelled:
            // A service restarting comes back within a second or two (the supervisor's backoff).
            EdgeError(
                .serviceUnavailable, "a Herald service is unavailable; try again later", headers: [.retryAfter: "1"])
        case .ok, .unknown, .internal, .dataLoss: EdgeError(.internalServerError, "internal error")
        }
    }

    /// The answer a route's thrown `error` gets; nil for an error no route means to throw (a
    /// 500, whose detail only the log gets).
    static func answer(for error: any Error) -> EdgeError? {
        switch error {
        case let e as EdgeError: e
        case let e as ServiceError: .from(e)
        case let e as HTTPError: EdgeError(e.status, e.body ?? e.status.reasonPhrase, headers: e.headers)
        default: nil
        }
    }

    func response(requestID: String) -> Response {
        Response(
            status: status, headers: headerFields(requestID: requestID),
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: jsonBody())))
    }

    /// This error's own headers, the JSON content type and the request id.
    func headerFields(requestID: String) -> HTTPFields {
        var headers = self.headers
        headers[.contentType] = "application/json; charset=utf-8"
        headers[.requestID] = requestID
        return headers
    }

    /// `{"error":"<word>","message":"<sentence>"}`.
    func jsonBody() -> [UInt8] {
        "{\"error\":\(jsonStringLiteral(Self.word(status))),\"message\":\(jsonStringLiteral(message))}".utf8.map { $0 }
    }

    /// "not_found" for 404: a stable word clients can switch on.
    private static func word(_ status: HTTPResponse.Status) -> String {
        status.reasonPhrase.lowercased().replacingOccurrences(of: " ", with: "_").replacingOccurrences(
            of: "-", with: "_")
    }
}

/// The edge's request context: Hummingbird's own storage plus the request id, made once per request
/// by ``EdgeErrorMiddleware`` (the caller's `X-Request-Id` when sane, else a fresh one) and read by
/// every route, every RPC it makes, the log line and the response header.
public struct EdgeRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var requestID = ""
    /// The client's IP address (empty for Unix sockets): the TCP peer's, or behind a trusted proxy
    /// the one its forwarding headers name (``TrustedProxies``, set by ``EdgeErrorMiddleware``).
    /// herald-auth shares logins out and throttles failed SAS tokens per key and address by it, so
    /// a stranger cannot lock a public key name out for everyone.
    public var remoteIP: String

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteIP = source.channel.remoteAddress?.ipAddress ?? ""
    }
}

/// Turns every error a route throws into a JSON answer, and logs each request once.
///
/// Unexpected errors become 500 with a generic message; their detail goes to the log only.
struct EdgeErrorMiddleware: RouterMiddleware {
    var trustedProxies = TrustedProxies.none

    func handle(
        _ request: Request, context: EdgeRequestContext, next: (Request, EdgeRequestContext) async throws -> Response
    ) async throws -> Response {
        try await serve(request, context: context, span: nil, next: next)
    }

    /// The middleware's work; `span`: the request's span when it records (``EdgeTracingMiddleware``,
    /// which runs this without a middleware of its own in between), which gets the client's address.
    nonisolated(nonsending) func serve(
        _ request: Request, context: EdgeRequestContext, span: HeraldSpan?,
        next: (Request, EdgeRequestContext) async throws -> Response
    ) async throws -> Response {
        let requestID = Self.requestID(request)
        var context = context
        context.requestID = requestID
        if !trustedProxies.isEmpty {
            context.remoteIP = trustedProxies.client(peer: context.remoteIP, headers: request.headers)
        }
        span?.setAttribute("client.address", context.remoteIP)
        let start = ContinuousClock.now
        // The request id goes with each line rather than on the logger: setting logger metadata
        // copies it (and with swift-log's StreamLogHandler re-rendered it, ~20k instructions per
        // request; HeraldService's TextLogHandler renders only what is logged), and most requests
        // log nothing at the default level.
        let logger = context.logger
        let response: Response
        do {
            var answer = try await next(request, context)
            answer.headers[.requestID] = requestID
            response = answer
        } catch {
            let edgeError: EdgeError
            if let answer = EdgeError.answer(for: error) {
                edgeError = answer
            } else {
                logger.error(
                    "request failed unexpectedly",
                    metadata: ["herald.error": "\(String(reflecting: error))", "herald.request_id": "\(requestID)"])
                edgeError = EdgeError(.internalServerError, "internal error")
            }
            response = edgeError.response(requestID: requestID)
        }
        let elapsed = ContinuousClock.now - start
        // By route pattern (e.g. /api/notifications/{id}), never by raw path: ids would explode the series.
        let route = context.endpointPath ?? "unmatched"
        HTTPMetrics.record(route: route, method: request.method, status: response.status.code, elapsed: elapsed)
        logger.info(
            "\(request.method) \(request.uri.path) \(response.status.code)",
            metadata: [
                "herald.duration_ms": "\(elapsed.wholeMilliseconds)", "herald.request_id": "\(requestID)",
                "herald.client_address": "\(context.remoteIP)",
            ])
        return response
    }

    /// The caller's `X-Request-Id` when it is a sane token, else a fresh one.
    static func requestID(_ request: Request) -> String {
        saneToken(request.headers.value(.requestID), maxBytes: 64) ?? newRequestID()
    }

    /// `value` when it is 1 to `maxBytes` of `A-Z a-z 0-9 - _` (plus `alsoAllowed`): a caller's id
    /// that may go into headers and log lines as it is.
    static func saneToken(_ value: String?, maxBytes: Int, alsoAllowed: Set<UInt8> = []) -> String? {
        guard let value, (1...maxBytes).contains(value.utf8.count),
            value.utf8.allSatisfy({
                $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || ($0 >= 0x30 && $0 <= 0x39)
                    || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7a) || alsoAllowed.contains($0)
            })
        else { return nil }
        return value
    }
}

/// The edge's request metrics, made once per route, method and status (see
/// ``CounterAndTimerByKey``), not per request.
enum HTTPMetrics {
    private struct Key: Hashable, Sendable {
        var route: String
        var method: HTTPRequest.Method
        var status: Int
    }

    private static let made = CounterAndTimerByKey<Key>()

    static func record(route: String, method: HTTPRequest.Method, status: Int, elapsed: Duration) {
        made.record(Key(route: route, method: method, status: status), nanoseconds: elapsed.wholeNanoseconds) {
            (
                Counter(
                    label: "herald_http_requests_total",
                    dimensions: [("route", route), ("method", "\(method)"), ("status", "\(status)")]),
                Metrics.Timer(
                    label: "herald_http_request_duration_seconds",
                    dimensions: [("route", route), ("status", "\(status)")])
            )
        }
    }
}
