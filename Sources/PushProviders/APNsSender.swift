import Foundation
import HeraldModel
public import HeraldProto
import JWTKit
import NIOCore
import NIOHPACK
import NIOHTTP1

/// APNs settings: how the provider authenticates (a token key or a certificate), the topic and
/// the service's URL.
public struct APNsCredentials: Sendable {
    public static let production = "https://api.push.apple.com"
    public static let sandbox = "https://api.sandbox.push.apple.com"

    /// How APNs knows the provider.
    public enum Auth: Sendable {
        /// Token-based: the `.p8` key (PKCS#8 PEM, P-256), its 10-character id (`kid`) and the
        /// developer team id (`iss`) sign a provider token every request carries.
        case token(keyPEM: String, keyID: String, teamID: String)
        /// Certificate-based: the connection presents the certificate (TLS client auth).
        case certificate(APNsCertificate)
    }

    public var auth: Auth
    /// The app's bundle id (`apns-topic`).
    public var topic: String
    /// ``production``, ``sandbox``, or a test double's URL.
    public var baseURL: String

    public init(auth: Auth, topic: String, baseURL: String) {
        self.auth = auth
        self.topic = topic
        self.baseURL = baseURL
    }

    /// The certificate, with certificate-based auth.
    public var certificate: APNsCertificate? {
        if case .certificate(let certificate) = auth { return certificate }
        return nil
    }
}

/// The APNs provider token: an ES256 JWT (`kid`, `iss`, `iat`), signed by jwt-kit, reused for
/// many requests. Apple refuses tokens older than an hour and answers TooManyProviderTokenUpdates
/// to tokens renewed more often than every 20 minutes, so a token is renewed once it is
/// `renewAfter` old (50 minutes), and a refused one is dropped only if it is at least
/// `minimumAge` (20 minutes) old.
public actor APNsProviderToken {
    struct Claims: JWTPayload {
        var iss: String
        var iat: Int64
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    public static let renewAfter: Int64 = 50 * 60
    public static let minimumAge: Int64 = 20 * 60
    private let keys = JWTKeyCollection()
    private let keyID: String
    private let teamID: String
    private let now: @Sendable () -> Int64
    private var cached: (token: String, issuedAt: Int64)?
    /// Tokens signed so far (tests read it).
    public private(set) var signed = 0

    /// `now`: Unix seconds (injected by tests).
    public init(keyPEM: String, keyID: String, teamID: String, now: @escaping @Sendable () -> Int64 = { unixSeconds() })
        async throws
    {
        await keys.add(ecdsa: try ES256PrivateKey(pem: keyPEM), kid: JWKIdentifier(string: keyID))
        self.keyID = keyID
        self.teamID = teamID
        self.now = now
    }

    /// The current token, signed anew when none is cached or the cached one is 50 minutes old.
    public func token() async throws -> String {
        let at = now()
        if let cached, at - cached.issuedAt < Self.renewAfter, at >= cached.issuedAt { return cached.token }
        let token = try await keys.sign(Claims(iss: teamID, iat: at), kid: JWKIdentifier(string: keyID))
        cached = (token, at)
        signed += 1
        return token
    }

    /// APNs said ExpiredProviderToken: renew, unless the token is younger than 20 minutes (Apple
    /// would refuse the renewal itself).
    public func refused(_ token: String) {
        guard let cached, cached.token == token, now() - cached.issuedAt >= Self.minimumAge else { return }
        self.cached = nil
    }
}

/// Sends to APNs over HTTP/2: `POST /3/device/<token>` with the provider token (token-based
/// auth; with a certificate, the connection carries the authentication), `apns-topic`,
/// `apns-push-type`, `apns-priority`, `apns-id` (the delivery's message id, the same on every
/// retry), `apns-expiration` and `apns-collapse-id`.
///
/// A batch goes out whole on one of a few connections (``HTTP2Pool``): one provider-token lookup,
/// one set of headers and one body buffer per payload, one deadline. APNs lets a connection carry
/// many concurrent streams (it advertises how many); streams beyond that wait in NIO's buffer.
///
/// A certificate that has ended is not presented: its batches are retried as
/// `CertificateExpired` (kept until their retry window ends, so a certificate replaced in time
/// delivers them), and one APNs refuses in the handshake as `CertificateRejected`.
public struct APNsSender: PushSender {
    public let credentials: APNsCredentials
    public let pool: HTTP2Pool
    /// The provider token, with token-based auth; nil with a certificate.
    public let token: APNsProviderToken?
    public let timeout: Duration
    private let now: @Sendable () -> Int64

    /// Token-based auth (`credentials.auth` is `.token`, signed by `token`) or certificate-based
    /// (`token` nil: the pool presents the certificate). `now`: Unix seconds (tests inject it).
    public init(
        credentials: APNsCredentials, client: PushClient, token: APNsProviderToken?, timeout: Duration,
        now: @escaping @Sendable () -> Int64 = { unixSeconds() }
    ) throws {
        self.credentials = credentials
        pool = try client.pool(url: credentials.baseURL, presenting: credentials.certificate)
        self.token = token
        self.timeout = timeout
        self.now = now
    }

    /// Every header that follows from a push's options: what the sender sends besides its
    /// credentials and topic, and what the inbox records.
    public static func headers(for options: DeliveryOptions) -> [Header] {
        var headers = [
            Header(name: "apns-push-type", value: options.pushType),
            Header(name: "apns-priority", value: String(options.priority)),
            Header(name: "content-type", value: options.contentType),
        ]
        // Without a TTL the header is left out: APNs then stores the push and retries it itself
        // (apns-expiration 0 would mean "try once, never store"). APNs wants Unix seconds.
        if options.expiresAtUnixMs > 0 {
            headers.append(Header(name: "apns-expiration", value: String(options.expiresAtUnixMs / 1000)))
        }
        if !options.collapseID.isEmpty { headers.append(Header(name: "apns-collapse-id", value: options.collapseID)) }
        return headers
    }

    public func send(_ items: [PushItem]) async -> [PushResult] {
        guard !items.isEmpty else { return [] }
        if let certificate = credentials.certificate, certificate.expired(at: now()) {
            return Array(repeating: .retry(status: 0, reason: Self.certificateExpired, after: nil), count: items.count)
        }
        var jwt: String?
        if let token {
            do { jwt = try await token.token() } catch {
                return Array(repeating: .failed(status: 0, reason: "ProviderTokenUnavailable"), count: items.count)
            }
        }
        var requests: [HTTP2Request] = []
        requests.reserveCapacity(items.count)
        // A batch's items share a few payloads (one per send and platform, or per rendered template).
        var last: (notificationID: String, key: OutboxPayload.Key, headers: HPACKHeaders, body: ByteBuffer)?
        for item in items {
            let shared: (notificationID: String, key: OutboxPayload.Key, headers: HPACKHeaders, body: ByteBuffer)
            if let last, last.notificationID == item.notificationID, last.key == item.payload.key {
                shared = last
            } else {
                shared = (
                    item.notificationID, item.payload.key, payloadHeaders(item.payload.options, jwt: jwt),
                    ByteBuffer(bytes: item.payload.body)
                )
                last = shared
            }
            var headers = HPACKHeaders()
            headers.reserveCapacity(shared.headers.count + 5)
            headers.add(name: ":method", value: "POST")
            headers.add(name: ":scheme", value: pool.scheme)
            headers.add(name: ":authority", value: pool.authority)
            // Different for every push: literals, so they do not push the token out of HPACK's table.
            headers.add(name: ":path", value: "/3/device/" + item.handle, indexing: .nonIndexable)
            headers.add(name: "apns-id", value: item.messageID, indexing: .nonIndexable)
            headers.add(contentsOf: shared.headers)
            requests.append(HTTP2Request(headers: headers, body: shared.body))
        }
        let results = PushHTTP.results(await pool.send(requests, timeout: timeout), classify: Self.classify)
        if let token, let jwt,
            results.contains(where: { if case .retry(403, "ExpiredProviderToken", _) = $0 { true } else { false } })
        {
            await token.refused(jwt)
        }
        return results
    }

    /// The reason of a batch not sent because the certificate has ended.
    public static let certificateExpired = "CertificateExpired"

    /// The headers every push of one payload carries (`jwt`: the provider token; nil with a
    /// certificate).
    private func payloadHeaders(_ options: DeliveryOptions, jwt: String?) -> HPACKHeaders {
        var headers = HPACKHeaders()
        if let jwt { headers.add(name: "authorization", value: "bearer \(jwt)") }
        headers.add(name: "apns-topic", value: credentials.topic)
        for header in Self.headers(for: options) { headers.add(name: header.name, value: header.value) }
        return headers
    }

    /// What an answer other than 200 means.
    static func classify(_ answer: PushHTTP.Answer) -> PushResult {
        // Parsed once: `json` reads the body each time it is asked.
        let json = answer.json
        let reason = json?["reason"] as? String ?? "HTTP \(answer.status)"
        switch (answer.status, reason) {
        case (200, _):
            return .delivered(status: 200)
        case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"):
            return .unregistered(status: 400, reason: reason, since: 0)
        case (410, _):
            // Unregistered / ExpiredToken: `timestamp` (ms) is when the token stopped being valid.
            return .unregistered(status: 410, reason: reason, since: invalidSince(json?["timestamp"]))
        case (403, "ExpiredProviderToken"):
            return .retry(status: 403, reason: reason, after: nil)
        default:
            return PushHTTP.generic(answer, reason: reason)
        }
    }

    /// Latest `timestamp` taken: 2100-01-01 in Unix ms.
    static let latestTimestamp: Double = 4_102_444_800_000

    /// A 410's `timestamp` as registration's `invalid_since_unix_ms`: a whole number of
    /// milliseconds from 1970 to 2100, else 0 (unknown: every registration of the token goes).
    /// `NSNumber.int64Value` wrapped 1e300 or 2⁶³ to a negative time, before which no registration
    /// was ever updated, so a dead token was kept and pushed to forever.
    static func invalidSince(_ timestamp: Any?) -> Int64 {
        guard let number = timestamp as? NSNumber else { return 0 }
        let value = number.doubleValue
        guard value >= 0, value <= latestTimestamp, value == value.rounded(.towardZero) else { return 0 }
        return Int64(value)
    }
}
