public import AsyncHTTPClient
import Foundation
import HeraldModel
public import HeraldProto
import HeraldRPC
import HeraldService
public import JWTKit
import NIOCore

/// APNs provider-token settings (token-based auth, a `.p8` key from Apple's developer account).
public struct APNsCredentials: Sendable {
    public static let production = "https://api.push.apple.com"
    public static let sandbox = "https://api.sandbox.push.apple.com"
    /// The `.p8` key (PKCS#8 PEM, P-256).
    public var keyPEM: String
    /// The key's 10-character id (`kid`).
    public var keyID: String
    /// The developer team id (`iss`).
    public var teamID: String
    /// The app's bundle id (`apns-topic`).
    public var topic: String
    /// ``production``, ``sandbox``, or a test double's URL.
    public var baseURL: String

    public init(keyPEM: String, keyID: String, teamID: String, topic: String, baseURL: String) {
        self.keyPEM = keyPEM
        self.keyID = keyID
        self.teamID = teamID
        self.topic = topic
        self.baseURL = baseURL
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
    public init(keyPEM: String, keyID: String, teamID: String, now: @escaping @Sendable () -> Int64 = { unixSeconds() }) async throws {
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

/// Sends to APNs over HTTP/2: `POST /3/device/<token>` with the provider token, `apns-topic`,
/// `apns-push-type`, `apns-priority`, `apns-id` (the delivery's message id, the same on every
/// retry), `apns-expiration` and `apns-collapse-id`. All requests share one HTTP/2 connection per
/// endpoint, up to `concurrency` streams of a batch at once.
public struct APNsSender: SingleRequestSender {
    public let credentials: APNsCredentials
    public let client: HTTPClient
    public let token: APNsProviderToken
    public let timeout: Duration
    public let concurrency: Int

    public init(credentials: APNsCredentials, client: HTTPClient, token: APNsProviderToken, timeout: Duration, concurrency: Int = 500) {
        self.credentials = credentials
        self.client = client
        self.token = token
        self.timeout = timeout
        self.concurrency = concurrency
    }

    /// The headers that follow from a push's options (the inbox records the same ones).
    public static func headers(for options: DeliveryOptions) -> [Header] {
        [
            Header(name: "apns-push-type", value: options.pushType), Header(name: "apns-priority", value: String(options.priority)),
            Header(name: "content-type", value: options.contentType),
        ]
    }

    public func send(_ item: PushItem) async -> PushResult {
        let jwt: String
        do { jwt = try await token.token() } catch { return .failed(status: 0, reason: "ProviderTokenUnavailable") }
        var request = HTTPClientRequest(url: "\(credentials.baseURL)/3/device/\(item.handle)")
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer \(jwt)")
        request.headers.add(name: "apns-topic", value: credentials.topic)
        let options = item.payload.options
        for header in Self.headers(for: options) { request.headers.add(name: header.name, value: header.value) }
        request.headers.add(name: "apns-id", value: item.messageID)
        // Without a TTL the header is left out: APNs then stores the push and retries it itself
        // (apns-expiration 0 would mean "try once, never store"). APNs wants Unix seconds.
        if options.expiresAtUnixMs > 0 { request.headers.add(name: "apns-expiration", value: String(options.expiresAtUnixMs / 1000)) }
        if !options.collapseID.isEmpty { request.headers.add(name: "apns-collapse-id", value: options.collapseID) }
        request.body = .bytes(ByteBuffer(bytes: item.payload.body))

        return await PushHTTP.send(client, request, timeout: timeout) { answer in
            let reason = answer.json?["reason"] as? String ?? "HTTP \(answer.status)"
            switch (answer.status, reason) {
            case (200, _):
                return .delivered(status: 200)
            case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"):
                return .unregistered(status: 400, reason: reason, since: 0)
            case (410, _):
                // Unregistered / ExpiredToken: `timestamp` (ms) is when the token stopped being valid.
                let since = (answer.json?["timestamp"] as? NSNumber)?.int64Value ?? 0
                return .unregistered(status: 410, reason: reason, since: since)
            case (403, "ExpiredProviderToken"):
                await token.refused(jwt)
                return .retry(status: 403, reason: reason, after: nil)
            default:
                return PushHTTP.generic(answer, reason: reason)
            }
        }
    }
}
