public import AsyncHTTPClient
import Foundation
import HeraldModel
public import HeraldProto
import NIOCore

/// WNS's OAuth client-credentials token (package SID and secret from the Partner Center).
public enum WNSAccessToken {
    public static let production = "https://login.live.com/accesstoken.srf"

    public static func cache(
        clientID: String, clientSecret: String, tokenURL: String, client: HTTPClient, timeout: Duration,
        now: @escaping @Sendable () -> Int64 = { unixSeconds() }
    ) -> AccessTokenCache {
        AccessTokenCache(now: now) {
            try await OAuthToken.fetch(
                client: client, url: tokenURL, timeout: timeout, now: now(),
                form: [
                    ("grant_type", "client_credentials"), ("client_id", clientID), ("client_secret", clientSecret),
                    ("scope", "notify.windows.com"),
                ])
        }
    }
}

/// Sends to WNS: `POST <channel URI>` with the bearer token, `X-WNS-Type` (toast, raw, badge,
/// tile), `Content-Type`, and `X-WNS-TTL` when the push has a TTL. The channel URI is the
/// registration's handle; herald-registration only accepts ones on the configured WNS hosts.
public struct WNSSender: SingleRequestSender {
    public let client: HTTPClient
    public let tokens: AccessTokenCache
    public let timeout: Duration
    public let concurrency: Int

    public init(client: HTTPClient, tokens: AccessTokenCache, timeout: Duration, concurrency: Int = 100) {
        self.client = client
        self.tokens = tokens
        self.timeout = timeout
        self.concurrency = concurrency
    }

    /// Every header that follows from a push's options at `now` (Unix ms): what the sender sends
    /// besides its bearer token, and what the inbox records.
    public static func headers(for options: DeliveryOptions, now: Int64 = unixMillis()) -> [Header] {
        var headers = [
            Header(name: "x-wns-type", value: options.pushType),
            Header(name: "content-type", value: options.contentType),
        ]
        if let left = options.secondsLeft(now: now) {
            headers.append(Header(name: "x-wns-ttl", value: String(max(1, left))))
        }
        if !options.collapseID.isEmpty {
            headers.append(Header(name: "x-wns-tag", value: String(options.collapseID.prefix(16))))
        }
        return headers
    }

    public func send(_ item: PushItem) async -> PushResult {
        let bearer: String
        do { bearer = try await tokens.token() } catch {
            return .retry(status: 0, reason: "AccessTokenUnavailable", after: nil)
        }
        var request = HTTPClientRequest(url: item.handle)
        request.method = .POST
        request.headers.add(name: "authorization", value: "Bearer \(bearer)")
        let options = item.payload.options
        for header in Self.headers(for: options) { request.headers.add(name: header.name, value: header.value) }
        request.body = .bytes(ByteBuffer(bytes: item.payload.body))
        return await PushHTTP.send(client, request, timeout: timeout) { answer in
            let status =
                answer.headers.first(name: "x-wns-error-description") ?? answer.headers.first(name: "x-wns-status")
            let reason = status.map { "HTTP \(answer.status) \($0)" } ?? "HTTP \(answer.status)"
            switch answer.status {
            case 200: return .delivered(status: 200)
            // 410: the channel expired; 404: WNS does not know it. Either way the app must register again.
            case 404, 410: return .unregistered(status: answer.status, reason: reason, since: 0)
            case 401:
                await tokens.invalidate(bearer)
                return .retry(status: 401, reason: reason, after: nil)
            // 406: the channel is throttled.
            case 406: return .retry(status: 406, reason: reason, after: answer.retryAfter)
            default: return PushHTTP.generic(answer, reason: reason)
            }
        }
    }
}
