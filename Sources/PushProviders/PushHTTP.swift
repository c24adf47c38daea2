public import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

/// The outbound HTTP client every sender shares: AsyncHTTPClient over SwiftNIO, HTTP/2 when the
/// service offers it in ALPN (APNs requires it; one connection per host carries many concurrent
/// streams), HTTP/1.1 otherwise. Redirects are never followed (a push service does not redirect,
/// and a device-supplied URL must not bounce Herald's credentials elsewhere).
public enum PushHTTP {
    /// The clients every sender shares. `extraCAFile`: a PEM bundle trusted besides the system
    /// roots (the tests' CA).
    /// The reason of a push that got no answer within the push timeout (both HTTP clients).
    public static let timeoutReason = "Timeout"

    public static func makeClient(extraCAFile: String?, connectTimeout: Duration = .seconds(10)) -> PushClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let extraCAFile { tls.additionalTrustRoots = [.file(extraCAFile)] }
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls, redirectConfiguration: .disallow,
            timeout: .init(connect: .nanoseconds(connectTimeout.wholeNanoseconds)))
        configuration.httpVersion = .automatic
        var h2 = tls
        // http/1.1 too: a service that offers only that answers the handshake (rather than failing
        // it), and the pool can tell its caller to fall back (FCM behind a proxy).
        h2.applicationProtocols = ["h2", "http/1.1"]
        return PushClient(
            http: HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration),
            h2: h2, connectTimeout: connectTimeout)
    }

    /// One exchange's answer: status, headers and up to 64 KiB of body (push services answer small).
    public struct Answer: Sendable {
        public var status: Int
        public var headers: HTTPHeaders
        public var body: [UInt8]

        /// `Retry-After` as delta-seconds or an HTTP-date, when present and sane.
        public var retryAfter: Duration? { PushHTTP.retryAfter(headers.first(name: "retry-after")) }

        /// The body as a JSON object, when it is one.
        public var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }
    }

    /// Sends `request`; a transport failure (refused, reset, GOAWAY, TLS, timeout) becomes `nil`
    /// with a short reason, never an error carrying URLs or headers into logs.
    public static func exchange(
        _ client: HTTPClient, _ request: HTTPClientRequest, timeout: Duration
    ) async -> Result<Answer, TransportFailure> {
        do {
            let response = try await client.execute(request, timeout: .nanoseconds(timeout.wholeNanoseconds))
            let body = try await response.body.collect(upTo: 64 * 1024)
            return .success(
                Answer(status: Int(response.status.code), headers: response.headers, body: Array(buffer: body)))
        } catch let error as HTTPClientError
            where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout
        {
            return .failure(TransportFailure(reason: timeoutReason))
        } catch {
            return .failure(TransportFailure(reason: "ConnectionError"))
        }
    }

    /// Sends `request` and maps the answer with `classify`; a transport failure is a retry
    /// (timeouts, refused or reset connections, GOAWAY before the stream was answered).
    public static func send(
        _ client: HTTPClient, _ request: HTTPClientRequest, timeout: Duration, classify: (Answer) async -> PushResult
    ) async -> PushResult {
        switch await exchange(client, request, timeout: timeout) {
        case .failure(let failure): .retry(status: 0, reason: failure.reason, after: nil)
        case .success(let answer): await classify(answer)
        }
    }

    public struct TransportFailure: Error, Sendable {
        public var reason: String
    }

    /// Parses `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an IMF-fixdate. Capped at a day.
    public static func retryAfter(_ value: String?) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int64(value), seconds >= 0 { return .seconds(min(seconds, 86400)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        let seconds = max(0, date.timeIntervalSinceNow)
        return .milliseconds(Int64(min(seconds, 86400) * 1000))
    }

    /// A pooled batch's answers as results, for the senders on ``HTTP2Pool``: no answer is a retry
    /// (like a transport failure in ``send(_:_:timeout:classify:)``), 200 is delivered, and any
    /// other answer is the provider's `classify`.
    static func results(_ answers: [HTTP2Answer], classify: (Answer) -> PushResult) -> [PushResult] {
        answers.map { answer in
            switch answer {
            case .failed(let reason): .retry(status: 0, reason: reason, after: nil)
            case .answered(200, _, _): .delivered(status: 200)
            case .answered(let status, let headers, let body):
                classify(
                    Answer(
                        status: status, headers: HTTPHeaders(headers.map { ($0.name, $0.value) }),
                        body: Array(buffer: body)))
            }
        }
    }

    /// The common mapping of statuses no provider treats specially: 429 and 5xx are retried
    /// (honouring Retry-After), anything else fails for good.
    public static func generic(_ answer: Answer, reason: String) -> PushResult {
        switch answer.status {
        case 200..<300: .delivered(status: answer.status)
        case 429, 500..<600: .retry(status: answer.status, reason: reason, after: answer.retryAfter)
        default: .failed(status: answer.status, reason: reason)
        }
    }

    /// `application/x-www-form-urlencoded` of `fields`, for OAuth token requests.
    public static func form(_ fields: [(String, String)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return fields.map { name, value in
            "\(name)=\(value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")"
        }.joined(separator: "&")
    }
}

/// The outbound clients of herald-dispatch: AsyncHTTPClient, where its generality pays (OAuth
/// token endpoints, FCM, WNS, Web Push: HTTP/1.1 or 2, any host), and the TLS context of the lean
/// HTTP/2 pools (``HTTP2Pool``) that carry APNs' batches. Shut down once, when the process stops.
public final class PushClient: Sendable {
    public let http: HTTPClient
    /// The HTTP/2 pools' TLS context (same trust roots, ALPN h2), made when the first pool is: it
    /// holds the system's trust roots parsed, which a dispatch with no APNs hub (the inbox
    /// provider, FCM or WNS only) never needs (made at start, it cost 2.1 MB of idle RSS, 0.8 MB of
    /// it heap). An unreadable CA file fails then too, when a
    /// pool is made, rather than at start.
    private let h2Context = Mutex<Result<NIOSSLContext, any Error>?>(nil)
    /// What the context is made from: a pool presenting a client certificate gets its own.
    private let h2Configuration: TLSConfiguration
    private let connectTimeout: Duration

    init(http: HTTPClient, h2: TLSConfiguration, connectTimeout: Duration) {
        self.http = http
        h2Configuration = h2
        self.connectTimeout = connectTimeout
    }

    private var h2: Result<NIOSSLContext, any Error> {
        h2Context.withLock { context in
            if let context { return context }
            let made = Result { try NIOSSLContext(configuration: h2Configuration) }
            context = made
            return made
        }
    }

    /// A pool of `connections` HTTP/2 connections to `url`'s origin; `presenting`: the client
    /// certificate its connections authenticate with (APNs' certificate-based auth).
    public func pool(url: String, connections: Int = 2, presenting certificate: APNsCertificate? = nil) throws
        -> HTTP2Pool
    {
        let tls = try certificate.map { try NIOSSLContext(configuration: $0.presented(in: h2Configuration)) }
        return try HTTP2Pool(
            url: url, tls: try tls ?? h2.get(), presentsCertificate: certificate != nil, connections: connections,
            connectTimeout: connectTimeout)
    }

    public func shutdown() async throws { try await http.shutdown() }
}

/// An OAuth 2.0 access token cached until shortly before it expires (FCM's service-account grant,
/// WNS's client credentials). Concurrent callers share one fetch.
public actor AccessTokenCache {
    public struct Token: Sendable {
        public var value: String
        /// Unix seconds.
        public var expiresAt: Int64
    }

    private let fetch: @Sendable () async throws -> Token
    private let now: @Sendable () -> Int64
    private var cached: Token?
    private var inFlight: Task<Token, any Error>?

    /// `now`: Unix seconds (injected by tests).
    public init(
        now: @escaping @Sendable () -> Int64 = { unixSeconds() }, fetch: @escaping @Sendable () async throws -> Token
    ) {
        self.fetch = fetch
        self.now = now
    }

    /// A token valid for at least another minute.
    public func token() async throws -> String {
        if let cached, cached.expiresAt - 60 > now() { return cached.value }
        if let inFlight { return try await inFlight.value.value }
        let task = Task { try await fetch() }
        inFlight = task
        defer { inFlight = nil }
        let token = try await task.value
        cached = token
        return token.value
    }

    /// The service refused the token (401): fetch a new one next time.
    public func invalidate(_ value: String) {
        if cached?.value == value { cached = nil }
    }
}

/// Unix epoch seconds.
public func unixSeconds() -> Int64 { Int64(Date().timeIntervalSince1970) }
