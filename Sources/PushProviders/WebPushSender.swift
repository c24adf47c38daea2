public import AsyncHTTPClient
import Crypto
import Foundation
import HeraldModel
public import HeraldProto
import JWTKit
import NIOCore

/// RFC 8291 message encryption with the `aes128gcm` content coding (RFC 8188), one record.
///
/// Written here from swift-crypto's primitives (P-256 ECDH, HKDF-SHA-256, AES-128-GCM): the mirror
/// has no Swift ECE library, and the composition is the RFC's few lines. The tests decrypt its
/// output with the independent http-ece implementation from PyPI.
public enum WebPushEncryption {
    /// Encrypts `plaintext` for a subscription's `p256dh` and `auth`. `senderKey` and `salt` are
    /// fresh per message unless a test fixes them.
    public static func encrypt(
        _ plaintext: [UInt8], p256dh: [UInt8], auth: [UInt8],
        senderKey: P256.KeyAgreement.PrivateKey = .init(), salt: [UInt8] = SecureRandom.bytes(16)
    ) throws -> [UInt8] {
        let receiver = try P256.KeyAgreement.PublicKey(x963Representation: p256dh)
        let senderPublic = Array(senderKey.publicKey.x963Representation)
        let shared = try senderKey.sharedSecretFromKeyAgreement(with: receiver)
        let ecdh = shared.withUnsafeBytes { Array($0) }
        // IKM = HKDF(auth, ecdh, "WebPush: info" || 0 || ua_public || as_public, 32)
        let keyInfo = Array("WebPush: info".utf8) + [0] + p256dh + senderPublic
        let prkKey = HKDF<SHA256>.extract(inputKeyMaterial: SymmetricKey(data: ecdh), salt: auth)
        let ikm = HKDF<SHA256>.expand(pseudoRandomKey: prkKey, info: keyInfo, outputByteCount: 32)
        // CEK and nonce from the salt (RFC 8188 §2.2, §2.3).
        let prk = HKDF<SHA256>.extract(inputKeyMaterial: ikm, salt: salt)
        let cek = HKDF<SHA256>.expand(
            pseudoRandomKey: prk, info: Array("Content-Encoding: aes128gcm".utf8) + [0], outputByteCount: 16)
        let nonce = HKDF<SHA256>.expand(
            pseudoRandomKey: prk, info: Array("Content-Encoding: nonce".utf8) + [0], outputByteCount: 12)
        // One record: plaintext, then the last-record delimiter 0x02, no further padding.
        let sealed = try AES.GCM.seal(
            plaintext + [2], using: cek, nonce: AES.GCM.Nonce(data: nonce.withUnsafeBytes { Array($0) }))
        let recordSize: UInt32 = 4096
        var header = salt
        header += withUnsafeBytes(of: recordSize.bigEndian) { Array($0) }
        header.append(UInt8(senderPublic.count))
        header += senderPublic
        return header + Array(sealed.ciphertext) + Array(sealed.tag)
    }
}

/// VAPID (RFC 8292): an ES256 JWT per push-service origin (`aud`), with `exp` 12 hours ahead and the
/// operator's contact as `sub`, signed by jwt-kit and reused until an hour before it expires.
public actor VAPID {
    struct Claims: JWTPayload {
        var aud: String
        var exp: Int64
        var sub: String
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    private let keys = JWTKeyCollection()
    private let subject: String
    /// The application server's public key, uncompressed, URL-safe base64 (the `k` parameter).
    public nonisolated let publicKey: String
    private let now: @Sendable () -> Int64
    private var cached: [String: (token: String, expires: Int64)] = [:]

    public init(keyPEM: String, subject: String, now: @escaping @Sendable () -> Int64 = { unixSeconds() }) async throws
    {
        let key = try P256.Signing.PrivateKey(pemRepresentation: keyPEM)
        await keys.add(ecdsa: try ES256PrivateKey(pem: keyPEM))
        publicKey = Base64URL.encode(key.publicKey.x963Representation)
        self.subject = subject
        self.now = now
    }

    /// The `Authorization` header value for an endpoint: `vapid t=<jwt>,k=<public key>` (no space after the comma, as the reference
    /// py-vapid writes and parses it).
    public func authorization(for endpoint: URL) async throws -> String {
        guard let scheme = endpoint.scheme, let host = endpoint.host else {
            throw ServiceError.invalidArgument("bad endpoint")
        }
        let audience = endpoint.port.map { "\(scheme)://\(host):\($0)" } ?? "\(scheme)://\(host)"
        let at = now()
        if let entry = cached[audience], entry.expires - 3600 > at { return "vapid t=\(entry.token),k=\(publicKey)" }
        let expires = at + 12 * 3600
        let token = try await keys.sign(Claims(aud: audience, exp: expires, sub: subject))
        cached[audience] = (token, expires)
        return "vapid t=\(token),k=\(publicKey)"
    }
}

/// Sends Web Push (RFC 8030): `POST <endpoint>` with the body encrypted for the subscription,
/// `Content-Encoding: aes128gcm`, `TTL`, `Urgency`, `Topic` when set, and VAPID authorization.
public struct WebPushSender: SingleRequestSender {
    /// Four weeks: the TTL when the push sets none (RFC 8030 requires the header).
    public static let defaultTTL: Int64 = 28 * 86400
    public let client: HTTPClient
    public let vapid: VAPID
    public let timeout: Duration
    public let concurrency: Int

    public init(client: HTTPClient, vapid: VAPID, timeout: Duration, concurrency: Int = 100) {
        self.client = client
        self.vapid = vapid
        self.timeout = timeout
        self.concurrency = concurrency
    }

    /// RFC 8030's Urgency for a priority: 10 high, 5 normal, 1 low; nil for any other number.
    public static func urgency(_ priority: Int32) -> String? {
        switch priority {
        case 10: "high"
        case 5: "normal"
        case 1: "low"
        default: nil
        }
    }

    /// Every header that follows from a push's options at `now` (Unix ms): what the sender sends
    /// besides its VAPID authorization and the encryption's, and what the inbox records.
    public static func headers(for options: DeliveryOptions, now: Int64 = unixMillis()) -> [Header] {
        var headers = [
            Header(name: "ttl", value: String(options.secondsLeft(now: now) ?? defaultTTL)),
            Header(name: "urgency", value: urgency(options.priority) ?? "high"),
        ]
        if !options.collapseID.isEmpty { headers.append(Header(name: "topic", value: options.collapseID)) }
        return headers
    }

    public func send(_ item: PushItem) async -> PushResult {
        let subscription: WebPushSubscription
        let body: [UInt8]
        let authorization: String
        do {
            subscription = try WebPushSubscription(handle: item.handle)
            body = try WebPushEncryption.encrypt(
                item.payload.body, p256dh: subscription.p256dh, auth: subscription.auth)
            authorization = try await vapid.authorization(for: subscription.endpoint)
        } catch {
            return .failed(status: 0, reason: "InvalidSubscription")
        }
        var request = HTTPClientRequest(url: subscription.endpoint.absoluteString)
        request.method = .POST
        request.headers.add(name: "authorization", value: authorization)
        request.headers.add(name: "content-encoding", value: "aes128gcm")
        request.headers.add(name: "content-type", value: "application/octet-stream")
        let options = item.payload.options
        for header in Self.headers(for: options) { request.headers.add(name: header.name, value: header.value) }
        request.body = .bytes(ByteBuffer(bytes: body))
        return await PushHTTP.send(client, request, timeout: timeout) { answer in
            switch answer.status {
            case 200..<300: return .delivered(status: answer.status)
            // The subscription is gone (unsubscribed or expired).
            case 404, 410: return .unregistered(status: answer.status, reason: "HTTP \(answer.status)", since: 0)
            default: return PushHTTP.generic(answer, reason: "HTTP \(answer.status)")
            }
        }
    }
}
