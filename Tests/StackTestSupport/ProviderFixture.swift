package import Crypto
package import Foundation
package import HeraldModel
package import HeraldProto
package import HeraldRPC
package import HeraldService
package import HeraldStack
package import HeraldTestSupport
package import NIOCore
package import ProviderDoubles
import PushProviders
package import Synchronization
package import Testing

/// Everything the push-service doubles and herald-dispatch need to talk to each other: a test CA
/// and a loopback certificate, an APNs .p8 key, an FCM service account (RSA key), WNS client
/// credentials, a VAPID key, and one double that plays every provider by path:
///
/// - `POST /3/device/<token>`: APNs (JWT, topic, push type, priority, apns-id, 4096 bytes)
/// - `POST /token`: Google's OAuth token endpoint (JWT-bearer grant)
/// - `POST /v1/projects/<project>/messages:send`: FCM HTTP v1
/// - `POST /wns-token`: WNS's token endpoint (client credentials)
/// - `POST /wns/<channel>`: a WNS channel URI
/// - `POST /push/<subscription>`: a Web Push endpoint (VAPID, aes128gcm, TTL)
///
/// `script` lets a test queue answers per device (APNs token, FCM token, WNS or push path);
/// with nothing queued, a request that passes every rule is accepted.
package final class ProviderFixture: Sendable {
    package static let keyID = "KEY1234567"
    package static let teamID = "TEAM123456"
    package static let topic = "com.example.herald"
    package static let project = "herald-test"
    package static let clientEmail = "herald@herald-test.iam.gserviceaccount.com"
    package static let wnsClientID = "ms-app://s-1-15-2-herald"
    package static let wnsSecret = "wns-secret-Qx7"
    package static let fcmAccessToken = "ya29.fcm-access-token-1"
    package static let wnsAccessToken = "EgAcAQMAAAAEgAAAC-wns-access-1"

    package let folder: String
    package let tls: StackTLS
    package let apnsKey: P256.Signing.PrivateKey
    package let vapidKey: P256.Signing.PrivateKey
    package let rsaKeyFile: String
    package let double: PushDouble
    /// Queued answers per device key.
    package let script = Mutex<[String: [PushDouble.Reply]]>([:])
    /// Rule violations the double found (each also answered with the provider's error).
    package let violations = Mutex<[String]>([])
    /// How long APNs takes to answer an accepted push (a slow service keeps streams in flight).
    package let apnsDelay = Mutex<TimeAmount>(.zero)
    /// The same for one topic (one hub's app): its provider slow, the others' not.
    package let apnsTopicDelay = Mutex<[String: TimeAmount]>([:])
    /// The VAPID public key each Web Push subscription was made with (the browser's
    /// `applicationServerKey`), by its endpoint's path; the push service refuses any other. A
    /// subscription not named here was made with the deployment's key (``vapidKey``).
    package let subscriptionKeys = Mutex<[String: P256.Signing.PublicKey]>([:])
    /// More APNs keys the double accepts, by key id: other hubs' credentials, each with its team and topic.
    package let extraAPNsKeys = Mutex<[String: (key: P256.Signing.PublicKey, team: String, topic: String)]>([:])
    /// Provider tokens whose ES256 signature checked out, by token and key, with the claims the
    /// rules read. Herald's sender reuses one token for every push (as APNs asks), and checking the
    /// signature of each push again in a debug build made the double, not Herald, the bottleneck
    /// of the fan-out drills (their pushes timed out in the double's queue). The claims are still
    /// checked on every push; a token signed by another key is checked afresh.
    private let verifiedTokens = Mutex<[String: APNsRules.ProviderToken]>([:])

    private init(
        folder: String, tls: StackTLS, apnsKey: P256.Signing.PrivateKey, vapidKey: P256.Signing.PrivateKey,
        rsaKeyFile: String,
        double: PushDouble
    ) {
        self.folder = folder
        self.tls = tls
        self.apnsKey = apnsKey
        self.vapidKey = vapidKey
        self.rsaKeyFile = rsaKeyFile
        self.double = double
    }

    package static func start(in folder: String) async throws -> ProviderFixture {
        let tls = try await StackFixture.makeCertificates(in: folder)
        let apnsKey = P256.Signing.PrivateKey()
        let vapidKey = P256.Signing.PrivateKey()
        let openssl = try #require(which("openssl"))
        let rsa = try await runProgram(
            openssl, ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "\(folder)/fcm.key"])
        try #require(rsa.status == 0, "openssl genpkey: \(rsa.error)")
        let box = FixtureBox()
        let double = try await PushDouble.start(.tls(certificate: tls.certificate, key: tls.key)) { request in
            box.fixture.withLock { $0 }?.respond(request) ?? PushDouble.Reply(status: 503)
        }
        let fixture = ProviderFixture(
            folder: folder, tls: tls, apnsKey: apnsKey, vapidKey: vapidKey, rsaKeyFile: "\(folder)/fcm.key",
            double: double)
        box.fixture.withLock { $0 = fixture }
        try fixture.writeFiles()
        return fixture
    }

    package func stop() async { await double.stop() }

    private func writeFiles() throws {
        try apnsKey.pemRepresentation.write(toFile: "\(folder)/apns.p8", atomically: true, encoding: .utf8)
        try vapidKey.pemRepresentation.write(toFile: "\(folder)/vapid.pem", atomically: true, encoding: .utf8)
        try apnsKey.publicKey.pemRepresentation.write(
            toFile: "\(folder)/apns.pub.pem", atomically: true, encoding: .utf8)
        try vapidKey.publicKey.pemRepresentation.write(
            toFile: "\(folder)/vapid.pub.pem", atomically: true, encoding: .utf8)
        try "\(Self.wnsSecret)\n".write(toFile: "\(folder)/wns.secret", atomically: true, encoding: .utf8)
        let account: [String: Any] = [
            "type": "service_account", "project_id": Self.project, "private_key_id": "fcm-key-1",
            "private_key": try String(contentsOfFile: rsaKeyFile, encoding: .utf8), "client_email": Self.clientEmail,
            "token_uri": "\(double.url)/token",
        ]
        try JSONSerialization.data(withJSONObject: account).write(
            to: URL(fileURLWithPath: "\(folder)/service-account.json"))
    }

    /// herald-dispatch's settings for every provider, pointed at the double.
    package func dispatchArguments(retryBaseMs: Int = 200) -> [String] {
        [
            "--push-ca-file", tls.ca, "--retry-base-ms", String(retryBaseMs),
            "--apns-key-file", "\(folder)/apns.p8", "--apns-key-id", Self.keyID, "--apns-team-id", Self.teamID,
            "--apns-topic", Self.topic, "--apns-url", double.url,
            "--fcm-service-account-file", "\(folder)/service-account.json", "--fcm-url", double.url,
            "--wns-client-id", Self.wnsClientID, "--wns-client-secret-file", "\(folder)/wns.secret",
            "--wns-token-url", "\(double.url)/wns-token",
            "--webpush-vapid-key-file", "\(folder)/vapid.pem", "--webpush-subject", "mailto:ops@example.com",
        ]
    }

    package func configure(_ configuration: inout StackConfiguration, retryBaseMs: Int = 200) {
        configuration.extraArguments["dispatch", default: []] += dispatchArguments(retryBaseMs: retryBaseMs)
        configuration.extraArguments["registration", default: []] += [
            "--wns-channel-hosts", "127.0.0.1", "--webpush-endpoint-hosts", "127.0.0.1",
        ]
    }

    /// Serves the edge over HTTPS with the doubles' certificate (NH's clients build https:// URLs).
    package func configureHTTPSEdge(_ configuration: inout StackConfiguration) {
        configuration.extraArguments["edge", default: []] += [
            "--http-tls-cert", tls.certificate, "--http-tls-key", tls.key,
        ]
    }

    /// Queues `replies` for the device `key` (answered in order, then the default).
    package func queue(_ key: String, _ replies: PushDouble.Reply...) {
        script.withLock { $0[key, default: []] += replies }
    }

    private func next(_ key: String) -> PushDouble.Reply? {
        script.withLock { queued in
            guard var list = queued[key], !list.isEmpty else { return nil }
            let first = list.removeFirst()
            queued[key] = list
            return first
        }
    }

    private func violation(_ text: String) { violations.withLock { $0.append(text) } }

    // MARK: the providers' rules

    package func respond(_ request: PushDouble.Request) -> PushDouble.Reply {
        guard request.method == "POST" else { return .json(405, ["reason": "MethodNotAllowed"]) }
        let path = request.path
        if path.hasPrefix("/3/device/") { return apns(request) }
        if path == "/token" { return googleToken(request) }
        if path == "/v1/projects/\(Self.project)/messages:send" { return fcm(request) }
        if path == "/wns-token" { return wnsToken(request) }
        if path.hasPrefix("/wns/") { return wns(request) }
        if path.hasPrefix("/push/") { return webPush(request) }
        violation("unknown path \(path)")
        return PushDouble.Reply(status: 404)
    }

    /// APNs: ``APNsRules`` (shared with herald-bench's double), then the test's script and delay.
    private func apns(_ request: PushDouble.Request) -> PushDouble.Reply {
        func refuse(_ refusal: APNsRules.Refusal) -> PushDouble.Reply {
            violation("APNs \(refusal.reason)")
            return .json(refusal.status, ["reason": refusal.reason])
        }
        let device = APNsRules.deviceToken(path: request.path)
        let bearer = APNsRules.providerToken(authorization: request.header("authorization"))
        let token: Substring
        let jwt: String
        switch (device, bearer) {
        case (.failure(let refusal), _), (_, .failure(let refusal)): return refuse(refusal)
        case (.success(let device), .success(let bearer)): (token, jwt) = (device, String(bearer))
        }
        // The key, team and topic the token's key id names: the fixture's own, or one registered for another hub.
        let kid = ES256JWT.unverifiedKeyID(jwt)
        let provider =
            kid.flatMap { kid in
                extraAPNsKeys.withLock { $0[kid] }.map {
                    APNsRules.Provider(key: $0.key, keyID: kid, teamID: $0.team, topic: $0.topic)
                }
            }
            ?? APNsRules.Provider(key: apnsKey.publicKey, keyID: Self.keyID, teamID: Self.teamID, topic: Self.topic)
        let cacheKey = jwt + "|" + provider.key.rawRepresentation.base64EncodedString()
        let verified: APNsRules.ProviderToken
        if let cached = verifiedTokens.withLock({ $0[cacheKey] }) {
            verified = cached
        } else {
            switch APNsRules.verify(providerToken: jwt, key: provider.key) {
            case .failure(let refusal): return refuse(refusal)
            case .success(let checked):
                verifiedTokens.withLock { cache in
                    if cache.count >= 256 { cache.removeAll() }
                    cache[cacheKey] = checked
                }
                verified = checked
            }
        }
        if let refusal = APNsRules.check(verified, for: provider, now: Date().timeIntervalSince1970) {
            return refuse(refusal)
        }
        if let refusal = APNsRules.checkHeaders(
            topic: request.header("apns-topic"), pushType: request.header("apns-push-type"),
            priority: request.header("apns-priority"), apnsID: request.header("apns-id"), for: provider)
            ?? APNsRules.checkPayload(request.body)
        {
            return refuse(refusal)
        }
        if let scripted = next(String(token)) { return scripted }
        let delay = apnsTopicDelay.withLock { $0[provider.topic] } ?? apnsDelay.withLock { $0 }
        return PushDouble.Reply(status: 200, headers: [("apns-id", request.header("apns-id") ?? "")], delay: delay)
    }

    private static func form(_ body: [UInt8]) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        return fields
    }

    /// Google's token endpoint: checks the grant's shape and claims (PyJWT checks its RS256 signature).
    private func googleToken(_ request: PushDouble.Request) -> PushDouble.Reply {
        let form = Self.form(request.body)
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = form["assertion"]
        else {
            violation("OAuth grant without grant_type/assertion")
            return .json(400, ["error": "invalid_grant"])
        }
        let parts = assertion.split(separator: ".")
        guard parts.count == 3, let claimBytes = Base64URL.decode(String(parts[1])),
            let headerBytes = Base64URL.decode(String(parts[0])),
            let claims = (try? JSONSerialization.jsonObject(with: Data(claimBytes))) as? [String: Any],
            let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
            header["alg"] as? String == "RS256", claims["iss"] as? String == Self.clientEmail,
            claims["aud"] as? String == "\(double.url)/token",
            claims["scope"] as? String == "https://www.googleapis.com/auth/firebase.messaging"
        else {
            violation("OAuth grant with wrong claims")
            return .json(400, ["error": "invalid_grant"])
        }
        return .json(200, ["access_token": Self.fcmAccessToken, "expires_in": 3599, "token_type": "Bearer"])
    }

    private func fcm(_ request: PushDouble.Request) -> PushDouble.Reply {
        guard request.header("authorization") == "Bearer \(Self.fcmAccessToken)" else {
            violation("FCM without the access token")
            return .json(401, ["error": ["code": 401, "status": "UNAUTHENTICATED"]])
        }
        guard let json = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
            let message = json["message"] as? [String: Any], let token = message["token"] as? String
        else {
            violation("FCM body is not {\"message\":{\"token\":…}}")
            return .json(400, ["error": ["code": 400, "status": "INVALID_ARGUMENT"]])
        }
        guard request.body.count <= 4096 + 4096 else {
            return .json(400, ["error": ["code": 400, "status": "INVALID_ARGUMENT"]])
        }
        if let scripted = next(token) { return scripted }
        return .json(200, ["name": "projects/\(Self.project)/messages/\(UUID().uuidString)"])
    }

    private func wnsToken(_ request: PushDouble.Request) -> PushDouble.Reply {
        let form = Self.form(request.body)
        guard form["grant_type"] == "client_credentials", form["client_id"] == Self.wnsClientID,
            form["client_secret"] == Self.wnsSecret, form["scope"] == "notify.windows.com"
        else {
            violation("WNS token request with wrong fields")
            return .json(400, ["error": "invalid_client"])
        }
        return .json(200, ["access_token": Self.wnsAccessToken, "token_type": "bearer", "expires_in": 86400])
    }

    private func wns(_ request: PushDouble.Request) -> PushDouble.Reply {
        guard request.header("authorization") == "Bearer \(Self.wnsAccessToken)" else {
            violation("WNS without the access token")
            return PushDouble.Reply(status: 401)
        }
        let type = request.header("x-wns-type") ?? ""
        guard ["wns/toast", "wns/raw", "wns/badge", "wns/tile"].contains(type) else {
            violation("WNS type \(type)")
            return PushDouble.Reply(status: 400)
        }
        guard request.body.count <= 5120 else { return PushDouble.Reply(status: 413) }
        if let scripted = next(request.path) { return scripted }
        return PushDouble.Reply(status: 200, headers: [("x-wns-status", "received")])
    }

    private func webPush(_ request: PushDouble.Request) -> PushDouble.Reply {
        func refuse(_ status: Int, _ text: String) -> PushDouble.Reply {
            violation("Web Push \(text)")
            return PushDouble.Reply(status: status)
        }
        guard let ttl = request.header("ttl"), Int(ttl) != nil else { return refuse(400, "TTL missing") }
        guard request.header("content-encoding") == "aes128gcm" else { return refuse(415, "content-encoding") }
        guard let authorization = request.header("authorization"), authorization.hasPrefix("vapid ") else {
            return refuse(401, "no VAPID")
        }
        var parameters: [String: String] = [:]
        for part in authorization.dropFirst(6).split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1).map(String.init)
            if pair.count == 2 { parameters[pair[0]] = pair[1] }
        }
        guard let k = parameters["k"], let t = parameters["t"], let raw = Base64URL.decode(k),
            let key = try? P256.Signing.PublicKey(x963Representation: raw),
            raw
                == Array(
                    (subscriptionKeys.withLock { $0[request.path] } ?? vapidKey.publicKey).x963Representation)
        else { return refuse(401, "VAPID k") }
        switch ES256JWT.verify(t, key: key) {
        case .failure(let why): return refuse(403, "VAPID \(why.reason)")
        case .success(let verified):
            let claims = verified.claims
            guard claims["aud"] as? String == double.url, let exp = (claims["exp"] as? NSNumber)?.doubleValue,
                exp > Date().timeIntervalSince1970, exp <= Date().timeIntervalSince1970 + 86400,
                (claims["sub"] as? String)?.hasPrefix("mailto:") == true
            else { return refuse(403, "VAPID claims") }
        }
        guard request.body.count <= 4096 else { return refuse(413, "too large") }
        if let scripted = next(request.path) { return scripted }
        return PushDouble.Reply(status: 201)
    }
}

package final class FixtureBox: Sendable {
    package let fixture = Mutex<ProviderFixture?>(nil)
}

/// A browser's push subscription: its ECDH key pair and auth secret, and the handle Herald stores.
package struct BrowserSubscription {
    package let key = P256.KeyAgreement.PrivateKey()
    package let auth: [UInt8] = (0..<16).map { _ in UInt8.random(in: 0...255) }
    package let endpoint: String

    package init(endpoint: String) { self.endpoint = endpoint }

    package var handle: String {
        let json: [String: Any] = [
            "endpoint": endpoint,
            "keys": ["p256dh": Base64URL.encode(key.publicKey.x963Representation), "auth": Base64URL.encode(auth)],
        ]
        return String(
            decoding: try! JSONSerialization.data(
                withJSONObject: json, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self)
    }
}
