import Crypto
import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC
import NotificationHubs

/// Checks Notification Hubs' `SharedAccessSignature` tokens, the way every NH SDK makes them.
///
/// `Authorization: SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key name>`,
/// parameters in any order (.NET, JS and Java write `sr,sig,se,skn`, the Python sample
/// `sig,se,skn,sr`, Go alphabetical). The signature is base64(HMAC-SHA256(key, sr + "\n" + se)) with
/// the key's UTF-8 bytes as written (not base64-decoded) and `sr` exactly as it appears in the
/// header, still URL-encoded: each SDK encodes it differently (upper or lower-case escapes,
/// lower-cased before or after), so decoding first would break some of them.
///
/// Then the token's audience: `sr` decoded, lower-cased, without scheme (.NET writes `http` even for
/// https), query (Java keeps it) or trailing `/`, must be the request URL or a prefix of it ending at
/// a `/` (JS, Go and the unofficial Python client sign the namespace root, .NET the full path, the
/// Python sample `…/{hub}`).
///
/// What a stranger can learn or cause (the Listen key ships in every app, so "stranger" includes
/// anyone holding one):
/// - **No enumeration.** An unknown hub, an unknown key name and a wrong signature get one answer,
///   "InvalidSignature", after the same work (an unknown key is checked against a decoy).
/// - **No lockout of the real key.** A correctly signed token is always served: failures are never
///   checked before the signature. They are counted per client address only, and an address past
///   its free failures gets 429 with `Retry-After` for its *failures*, so a client that keeps
///   sending bad tokens is told to back off while its good ones, and everyone else's, pass.
/// - **Bounded state.** A header is at most ``SharedAccessSignature/maxHeaderLength`` bytes and a key
///   name ``SharedAccessSignature/maxKeyNameLength`` (NH's own limit); the failure ledger is keyed by address, never by a
///   name the caller chose, and ``MemoryLockoutLedger`` bounds its entries.
public struct SASVerifier: Sendable {
    public let hubs: HubStore
    /// Failed tokens per client address (the edge's peer address).
    public let throttle: LoginThrottle
    private let now: @Sendable () -> Int64
    /// How long an answer may be reused (`cache_until_unix_ms`), ms; 0: never.
    private let reuseFor: Int64

    /// Longest client address kept as a ledger key (an IPv6 literal is at most 45 characters).
    static let maxClientLength = 64

    public init(
        hubs: HubStore, throttle: LoginThrottle = LoginThrottle(freeFailures: 20),
        reuseFor: Duration = .zero, now: @escaping @Sendable () -> Int64 = unixMillis
    ) {
        self.hubs = hubs
        self.throttle = throttle
        self.reuseFor = reuseFor.wholeMilliseconds
        self.now = now
    }

    /// The rights of the key that signed `header` for a request to `resource` ("host[:port]/path").
    /// Failures count per `client` address.
    public func authorize(hub: String, header: String, resource: String, client: String = "") async throws
        -> AuthorizeSasResponse
    {
        do {
            let token = try SharedAccessSignature.parse(header)
            let key = try await hubs.secrets(hub: hub, name: token.keyName)
            let now = self.now()
            try SharedAccessSignature.verify(
                token, primary: key?.primary, secondary: key?.secondary, now: now, resource: resource)
            guard let key else { throw ServiceError(.internal, "a token verified without a key") }
            // `parse` bounds `se` to 9999-12-31, so neither product overflows.
            var answer = AuthorizeSasResponse(
                keyName: token.keyName, maxInstallations: key.maxInstallations, hubID: key.hubID,
                audience: SASAudience.normalized(token.rawResource),
                cacheUntilUnixMs: reuseFor > 0 ? min(now + reuseFor, token.expiry * 1000) : 0)
            answer.hubRights = key.rights
            answer.requestsPerSecond = key.rate.perSecond
            answer.requestBurst = key.rate.burst
            return answer
        } catch let error as ServiceError where error.code == .unauthenticated {
            let address = "sas/" + String(client.prefix(Self.maxClientLength))
            try await throttle.failed(address)
            do {
                try await throttle.check(address)
            } catch let locked as ServiceError {
                throw ServiceError.resourceExhausted(
                    "too many failed tokens from this address; retry after \(locked.retryAfterSeconds ?? 1) s (\(error.message))",
                    retryAfterSeconds: locked.retryAfterSeconds ?? 1)
            }
            throw error
        }
    }
}
