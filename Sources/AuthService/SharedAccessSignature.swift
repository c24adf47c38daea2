import Crypto
import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC

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
/// - **Bounded state.** A header is at most ``maxHeaderLength`` bytes and a key name
///   ``maxKeyNameLength`` (NH's own limit); the failure ledger is keyed by address, never by a
///   name the caller chose, and ``MemoryLockoutLedger`` bounds its entries.
public struct SASVerifier: Sendable {
    public let hubs: HubStore
    /// Failed tokens per client address (the edge's peer address).
    public let throttle: LoginThrottle
    private let now: @Sendable () -> Int64
    /// How long an answer may be reused (`cache_until_unix_ms`), ms; 0: never.
    private let reuseFor: Int64

    /// Longest `Authorization` header taken: a token from any SDK is a few hundred bytes.
    public static let maxHeaderLength = 4096
    /// Longest key name (`skn`), as NH's SharedAccessAuthorizationRule allows.
    public static let maxKeyNameLength = 256
    /// Longest client address kept as a ledger key (an IPv6 literal is at most 45 characters).
    static let maxClientLength = 64
    /// What an unknown key's token is checked against, so that it costs what a known one does.
    private static let decoy = SymmetricKey(size: .bits256)

    public init(
        hubs: HubStore, throttle: LoginThrottle = LoginThrottle(freeFailures: 20),
        reuseFor: Duration = .zero, now: @escaping @Sendable () -> Int64 = unixMillis
    ) {
        self.hubs = hubs
        self.throttle = throttle
        self.reuseFor = reuseFor.wholeMilliseconds
        self.now = now
    }

    /// The parts of a token, `sr` kept raw.
    public struct Token: Equatable, Sendable {
        public var rawResource: String
        public var signature: Data
        public var expiry: Int64
        public var keyName: String
    }

    /// The rights of the key that signed `header` for a request to `resource` ("host[:port]/path").
    /// Failures count per `client` address.
    public func authorize(hub: String, header: String, resource: String, client: String = "") async throws
        -> AuthorizeSasResponse
    {
        do {
            let token = try Self.parse(header)
            let key = try await hubs.secrets(hub: hub, name: token.keyName)
            let now = self.now()
            try Self.verify(token, primary: key?.primary, secondary: key?.secondary, now: now, resource: resource)
            guard let key else { throw ServiceError(.internal, "a token verified without a key") }
            // `parse` bounds `se` to 9999-12-31, so neither product overflows.
            var answer = AuthorizeSasResponse(
                keyName: token.keyName, maxInstallations: key.maxInstallations, hubID: key.hubID,
                audience: SASAudience.normalized(token.rawResource),
                cacheUntilUnixMs: reuseFor > 0 ? min(now + reuseFor, token.expiry * 1000) : 0)
            answer.hubRights = key.rights
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

    /// Whether `token` is signed with one of the key's two secrets (nil: no such key), unexpired at
    /// `now` (Unix ms) and meant for `resource`; UNAUTHENTICATED with NH's words otherwise.
    /// Synchronous and store-free, so the fuzzer drives it with what `parse` lets through.
    public static func verify(_ token: Token, primary: String?, secondary: String?, now: Int64, resource: String) throws
    {
        let message = Data("\(token.rawResource)\n\(token.expiry)".utf8)
        // Both compared in constant time (swift-crypto's isValidAuthenticationCode), both always,
        // and against the decoy when there is no such key: the answer and its cost are the same.
        let first = HMAC<SHA256>.isValidAuthenticationCode(
            token.signature, authenticating: message, using: primary.map { SymmetricKey(data: Data($0.utf8)) } ?? decoy)
        let second = HMAC<SHA256>.isValidAuthenticationCode(
            token.signature, authenticating: message,
            using: secondary.map { SymmetricKey(data: Data($0.utf8)) } ?? decoy)
        guard primary != nil, first || second else {
            throw ServiceError.unauthenticated("InvalidSignature: The token has an invalid signature.")
        }
        // `parse` bounds `se` to 9999-12-31 (TimeValue), so this product cannot overflow.
        guard token.expiry * 1000 > now else {
            throw ServiceError.unauthenticated("ExpiredToken: The token is expired (se \(token.expiry)).")
        }
        guard SASAudience.covers(SASAudience.normalized(token.rawResource), resource: resource) else {
            throw ServiceError.unauthenticated("40104: Invalid authorization token audience.")
        }
    }

    /// Splits the header into its four parameters, in any order.
    public static func parse(_ header: String) throws -> Token {
        let malformed = ServiceError.unauthenticated(
            "MalformedToken: the Authorization header must be SharedAccessSignature sr=…&sig=…&se=…&skn=…")
        let scheme = "sharedaccesssignature "
        guard header.utf8.count <= maxHeaderLength else { throw malformed }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix(scheme) else { throw malformed }
        var fields: [String: String] = [:]
        for pair in trimmed.dropFirst(scheme.count).split(separator: "&", omittingEmptySubsequences: true) {
            guard let equals = pair.firstIndex(of: "=") else { throw malformed }
            let name = pair[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            guard fields[name] == nil else { throw malformed }
            fields[name] = String(pair[pair.index(after: equals)...])
        }
        guard let sr = fields["sr"], !sr.isEmpty, let sig = fields["sig"]?.removingPercentEncoding,
            let signature = Data(base64Encoded: sig), let seText = fields["se"],
            let expiry = TimeValue.unixSeconds(seText),
            let skn = fields["skn"]?.removingPercentEncoding, !skn.isEmpty, skn.utf8.count <= maxKeyNameLength
        else { throw malformed }
        return Token(rawResource: sr, signature: signature, expiry: expiry, keyName: skn)
    }

    /// `sr` decoded, lower-cased, without scheme, query, fragment, default port or trailing `/`.
    /// ``SASAudience/normalized(_:)``: what a token's `sr` covers.
    public static func normalizedAudience(_ raw: String) -> String { SASAudience.normalized(raw) }

    /// ``SASAudience/covers(_:resource:)``.
    public static func covers(audience: String, resource: String) -> Bool {
        SASAudience.covers(audience, resource: resource)
    }
}
