public import AsyncHTTPClient
import Foundation
import HeraldModel
public import HeraldProto
import JWTKit
import NIOCore
import NIOHPACK
import NIOHTTP1

/// A Google service-account key file (the JSON Firebase's console downloads).
public struct FCMServiceAccount: Sendable, Decodable {
    public var projectID: String
    public var privateKeyID: String
    public var privateKey: String
    public var clientEmail: String
    public var tokenURI: String

    enum CodingKeys: String, CodingKey {
        case projectID = "project_id"
        case privateKeyID = "private_key_id"
        case privateKey = "private_key"
        case clientEmail = "client_email"
        case tokenURI = "token_uri"
    }

    public init(json: [UInt8]) throws {
        do { self = try JSONDecoder().decode(Self.self, from: Data(json)) } catch {
            throw ConfigError(
                "the FCM service-account file is not a service-account key (project_id, private_key, client_email, token_uri)"
            )
        }
    }
}

/// FCM's OAuth 2.0 access token from the service account: an RS256 JWT grant (RFC 7523) signed by
/// jwt-kit, exchanged at the account's `token_uri`, cached until a minute before it expires.
public enum FCMAccessToken {
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    struct Claims: JWTPayload {
        var iss: String
        var scope: String
        var aud: String
        var iat: Int64
        var exp: Int64
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// `tokenURL` overrides the account's `token_uri` (tests).
    public static func cache(
        account: FCMServiceAccount, tokenURL: String?, client: HTTPClient, timeout: Duration,
        now: @escaping @Sendable () -> Int64 = { unixSeconds() }
    ) async throws -> AccessTokenCache {
        let keys = JWTKeyCollection()
        await keys.add(
            rsa: try Insecure.RSA.PrivateKey(pem: account.privateKey), digestAlgorithm: .sha256,
            kid: JWKIdentifier(string: account.privateKeyID))
        let url = tokenURL ?? account.tokenURI
        return AccessTokenCache(now: now) {
            let at = now()
            let assertion = try await keys.sign(
                Claims(iss: account.clientEmail, scope: scope, aud: account.tokenURI, iat: at, exp: at + 3600),
                kid: JWKIdentifier(string: account.privateKeyID))
            return try await OAuthToken.fetch(
                client: client, url: url, timeout: timeout, now: at,
                form: [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", assertion)])
        }
    }
}

/// The token endpoint exchange shared by FCM and WNS.
enum OAuthToken {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func fetch(client: HTTPClient, url: String, timeout: Duration, now: Int64, form: [(String, String)])
        async throws
        -> AccessTokenCache.Token
    {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(string: PushHTTP.form(form)))
        switch await PushHTTP.exchange(client, request, timeout: timeout) {
        case .failure(let failure): throw Failure(description: "token endpoint: \(failure.reason)")
        case .success(let answer):
            guard answer.status == 200, let json = answer.json, let token = json["access_token"] as? String else {
                // The error body (RFC 6749 §5.2) names the problem and carries no secret.
                let error = answer.json?["error"] as? String ?? "no access_token"
                throw Failure(description: "token endpoint answered \(answer.status): \(error)")
            }
            let lifetime = (json["expires_in"] as? NSNumber)?.int64Value ?? 3600
            return AccessTokenCache.Token(value: token, expiresAt: now + lifetime)
        }
    }
}

/// Sends to FCM HTTP v1: `POST /v1/projects/<project>/messages:send` with a bearer token and
/// `{"message":{"token":<handle>,…payload…}}`. The payload's own bytes (data and/or notification
/// message) are kept as they are; `android.ttl` and `android.collapse_key` are added when set.
///
/// A batch goes out whole over HTTP/2 (``HTTP2Pool``, as APNs: one token look-up, one flush, one
/// deadline), which FCM's endpoint offers. FCM, unlike APNs, does not require HTTP/2: if the
/// configured URL does not offer it in ALPN (a proxy, say), every batch goes through
/// AsyncHTTPClient instead, a request per device.
public struct FCMSender: PushSender {
    public static let production = "https://fcm.googleapis.com"
    public let baseURL: String
    public let projectID: String
    public let pool: HTTP2Pool
    public let client: HTTPClient
    public let tokens: AccessTokenCache
    public let timeout: Duration

    public init(baseURL: String, projectID: String, client: PushClient, tokens: AccessTokenCache, timeout: Duration)
        throws
    {
        self.baseURL = baseURL
        self.projectID = projectID
        pool = try client.pool(url: baseURL)
        self.client = client.http
        self.tokens = tokens
        self.timeout = timeout
    }

    /// The headers that follow from a push's options (the inbox records the same ones; the request
    /// itself is always JSON, the payload spliced into FCM's envelope, with the TTL and collapse key
    /// in the envelope rather than in headers).
    public static func headers(for options: DeliveryOptions) -> [Header] {
        [Header(name: "content-type", value: options.contentType)]
    }

    /// The request body for one device.
    /// `now` is Unix ms.
    public static func message(_ item: PushItem, now: Int64 = unixMillis()) -> [UInt8] {
        let options = item.payload.options
        var android: [String] = []
        if let left = options.secondsLeft(now: now) { android.append(#""ttl":"\#(left)s""#) }
        if !options.collapseID.isEmpty { android.append(#""collapse_key":\#(jsonStringLiteral(options.collapseID))"#) }
        var body = item.payload.body
        // PlatformRules checked the body is a JSON object; splice the target (and options) in front.
        while let last = body.last, last != UInt8(ascii: "}") { body.removeLast() }
        guard let open = body.firstIndex(of: UInt8(ascii: "{")) else { return [] }
        let inner = body[(open + 1)..<(body.count - 1)]
        let isEmpty = inner.allSatisfy { $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }
        var prefix = #"{"message":{"token":\#(jsonStringLiteral(item.handle))"#
        if !android.isEmpty {
            if (try? JSONSerialization.jsonObject(with: Data(item.payload.body)) as? [String: Any])?["android"] != nil {
                return merged(item, now: now)
            }
            prefix += #","android":{\#(android.joined(separator: ","))}"#
        }
        return Array(prefix.utf8) + (isEmpty ? [] : [UInt8(ascii: ",")] + inner) + Array("}}".utf8)
    }

    /// The payload already has an `android` object: merge the options into it (key order may change).
    private static func merged(_ item: PushItem, now: Int64) -> [UInt8] {
        var message = (try? JSONSerialization.jsonObject(with: Data(item.payload.body)) as? [String: Any]) ?? [:]
        var android = message["android"] as? [String: Any] ?? [:]
        if let left = item.payload.options.secondsLeft(now: now) { android["ttl"] = "\(left)s" }
        if !item.payload.options.collapseID.isEmpty { android["collapse_key"] = item.payload.options.collapseID }
        message["android"] = android
        message["token"] = item.handle
        return Array(
            (try? jsonData(["message": message], options: [.sortedKeys])) ?? Data())
    }

    public func send(_ items: [PushItem]) async -> [PushResult] {
        guard !items.isEmpty else { return [] }
        let bearer: String
        do { bearer = try await tokens.token() } catch {
            return Array(repeating: .retry(status: 0, reason: "AccessTokenUnavailable", after: nil), count: items.count)
        }
        if pool.offersHTTP2 {
            let path = "/v1/projects/\(projectID)/messages:send"
            let requests = items.map { item in
                var headers = HPACKHeaders()
                headers.reserveCapacity(6)
                headers.add(name: ":method", value: "POST")
                headers.add(name: ":scheme", value: pool.scheme)
                headers.add(name: ":authority", value: pool.authority)
                headers.add(name: ":path", value: path)
                headers.add(name: "authorization", value: "Bearer \(bearer)")
                headers.add(name: "content-type", value: "application/json; charset=UTF-8")
                return HTTP2Request(headers: headers, body: ByteBuffer(bytes: Self.message(item)))
            }
            let answers = await pool.send(requests, timeout: timeout)
            let noHTTP2 = answers.contains { if case .failed(HTTP2Pool.noHTTP2) = $0 { true } else { false } }
            if !noHTTP2 {
                let results = PushHTTP.results(answers, classify: Self.classify)
                if results.contains(where: { if case .retry(401, _, _) = $0 { true } else { false } }) {
                    await tokens.invalidate(bearer)
                }
                return results
            }
        }
        return await HTTP1(sender: self, bearer: bearer).send(items)
    }

    /// The request per device through AsyncHTTPClient, when the URL does not offer HTTP/2.
    struct HTTP1: SingleRequestSender {
        let sender: FCMSender
        let bearer: String
        var concurrency: Int { 100 }

        func send(_ item: PushItem) async -> PushResult {
            var request = HTTPClientRequest(url: "\(sender.baseURL)/v1/projects/\(sender.projectID)/messages:send")
            request.method = .POST
            request.headers.add(name: "authorization", value: "Bearer \(bearer)")
            request.headers.add(name: "content-type", value: "application/json; charset=UTF-8")
            request.body = .bytes(ByteBuffer(bytes: FCMSender.message(item)))
            return await PushHTTP.send(sender.client, request, timeout: sender.timeout) { answer in
                let result = FCMSender.classify(answer)
                if case .retry(401, _, _) = result { await sender.tokens.invalidate(bearer) }
                return result
            }
        }
    }

    /// What an answer means. {"error":{"code":404,"status":"NOT_FOUND","details":[{"errorCode":"UNREGISTERED",…}]}}
    static func classify(_ answer: PushHTTP.Answer) -> PushResult {
        let error = answer.json?["error"] as? [String: Any]
        let details = error?["details"] as? [[String: Any]] ?? []
        let code =
            details.compactMap { $0["errorCode"] as? String }.first ?? error?["status"] as? String
            ?? "HTTP \(answer.status)"
        switch (answer.status, code) {
        case (200, _): return .delivered(status: 200)
        case (_, "UNREGISTERED"): return .unregistered(status: answer.status, reason: code, since: 0)
        case (401, _): return .retry(status: 401, reason: code, after: nil)
        default: return PushHTTP.generic(answer, reason: code)
        }
    }
}
