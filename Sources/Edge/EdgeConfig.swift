import Foundation
public import HeraldModel
import HeraldRPC
import HeraldService

/// Settings of herald-edge, besides ``RuntimeConfig``'s.
///
/// - `http-host` (`HERALD_HTTP_HOST`, `127.0.0.1`): address to listen on.
/// - `http-port` (`HERALD_HTTP_PORT`, 8080): port; 0 picks a free one.
/// - `profile` (`HERALD_PROFILE`, `secure`): `secure` or `rich`.
/// - `max-body-bytes` (`HERALD_MAX_BODY_BYTES`, 65536): largest JSON body on `api/*` routes.
/// - `max-content-bytes` (`HERALD_MAX_CONTENT_BYTES`, 5242880): largest content uploaded to
///   `POST /v1/notifications` (413 above). Keep it at or below herald-payload's own limit.
/// - `rich-image` (`HERALD_RICH_IMAGE`, built in): the file the `rich` profile sends; its type
///   comes from the extension (png, jpg/jpeg, gif, webp). Empty: Herald's built-in 64×64 PNG.
/// - `rich-message` (`HERALD_RICH_MESSAGE`, `Check this image out!`): the `rich` profile's message.
/// - `header-timeout-seconds` (`HERALD_HEADER_TIMEOUT_SECONDS`, 30): a connection must send a
///   complete request head within this long of opening or of its previous answer; else it is
///   closed (slow or idle clients cannot hold connections). See ``ConnectionGuard``.
/// - `body-timeout-seconds` (`HERALD_BODY_TIMEOUT_SECONDS`, 60): a request's whole body must
///   arrive within this long of its head.
/// - `drain-idle-grace-ms` (`HERALD_DRAIN_IDLE_GRACE_MS`, 1000): once SIGTERM starts the drain, how
///   long a connection with no request in progress may still deliver a request head (answered,
///   with `Connection: close`) before it is closed: a request already on its way when the signal
///   came is served, not cut off. See ``ConnectionGuard``. 0 closes idle connections at once.
/// - `http-tls-cert` and `http-tls-key` (`HERALD_HTTP_TLS_CERT`, `HERALD_HTTP_TLS_KEY`, empty):
///   PEM files; when set, the edge serves HTTPS on its port (NH's clients build `https://` URLs
///   from a connection string and cannot be told otherwise). Empty: plain HTTP, for a TLS proxy in
///   front. Not the services' own `tls-cert`/`tls-key`, which secure the RPCs between them.
/// - `nh-test-send-wait-ms` (`HERALD_NH_TEST_SEND_WAIT_MS`, 10000): how long an NH test send
///   (`POST /{hub}/messages?test`) waits for its deliveries before it answers with what it has
///   (a device not yet done is "still being delivered"). 0 answers at once.
/// - `trusted-proxies` (`HERALD_TRUSTED_PROXIES`, none): CIDRs (or addresses) of the proxies in
///   front of the edge, e.g. `10.0.0.0/8`. A request from one of them is taken to come from the
///   right-most address in `trusted-proxy-header` that is not one of them; that is the address
///   every per-address bound, log line and trace uses (see ``TrustedProxies``). None: the TCP peer
///   is the client and no forwarding header is read.
/// - `trusted-proxy-header` (`HERALD_TRUSTED_PROXY_HEADER`, `X-Forwarded-For`): the header those
///   proxies write, `X-Forwarded-For` or `Forwarded`; only it is read, the other ignored.
/// - `hub-rate-share` (`HERALD_HUB_RATE_SHARE`, 1): how many edge replicas share each hub's request
///   rate (`herald hubs limits --requests-per-second`): each enforces that fraction of it, with no
///   state shared between them (see ``HubRateLimiter``). Set it to the number of edge replicas.
/// - `test-mode` (`HERALD_TEST_MODE`, off; a ``RuntimeConfig`` key every service reads): serve
///   `GET /v1/test/inbox` and `POST /v1/test/reset` (see `TestRoutes.swift`). Test stacks only.
///
/// Once listening, the edge writes its base URL to `<runtime-dir>/edge.url`.
public struct EdgeConfig: Sendable {
    public static let keys: Set<String> = [
        "http-host", "http-port", "profile", "max-body-bytes", "max-content-bytes", "rich-image", "rich-message",
        "header-timeout-seconds", "body-timeout-seconds", "drain-idle-grace-ms", "http-tls-cert", "http-tls-key",
        "nh-test-send-wait-ms", "trusted-proxies", "trusted-proxy-header",
        "hub-rate-share",
    ]
    public var host: String
    public var port: Int
    public var profile: EdgeProfile
    public var maxBodyBytes: Int
    public var maxContentBytes: Int
    public var richImage: [UInt8]
    public var richImageType: String
    public var richMessage: String
    public var headerTimeout: Duration
    public var bodyTimeout: Duration
    public var drainIdleGrace: Duration
    public var nhTestSendWait: Duration
    /// Whose forwarding headers name the client (`trusted-proxies`).
    public var trustedProxies: TrustedProxies
    public var testMode: Bool
    /// Edge replicas sharing each hub's request rate (`hub-rate-share`).
    public var hubRateShare: Int
    /// PEM certificate chain and key of the HTTPS listener; nil: plain HTTP.
    public var httpTLS: (certificate: String, key: String)?

    public init(reader: ConfigReader) throws {
        host = reader.string("http-host", default: "127.0.0.1")
        port = try reader.int("http-port", default: 8080)
        profile = try reader.choice("profile", default: .secure)
        maxBodyBytes = try reader.int("max-body-bytes", default: 64 << 10)
        maxContentBytes = try reader.int("max-content-bytes", default: 5 << 20)
        richMessage = reader.string("rich-message", default: "Check this image out!")
        guard (0...65535).contains(port) else { throw ConfigError("http-port must be 0...65535") }
        let headerSeconds = try reader.int("header-timeout-seconds", default: 30)
        let bodySeconds = try reader.int("body-timeout-seconds", default: 60)
        guard (1...3600).contains(headerSeconds), (1...3600).contains(bodySeconds) else {
            throw ConfigError("header-timeout-seconds and body-timeout-seconds must be 1...3600")
        }
        headerTimeout = .seconds(headerSeconds)
        bodyTimeout = .seconds(bodySeconds)
        let graceMilliseconds = try reader.int("drain-idle-grace-ms", default: 1000)
        guard (0...60000).contains(graceMilliseconds) else {
            throw ConfigError("drain-idle-grace-ms must be 0...60000")
        }
        drainIdleGrace = .milliseconds(graceMilliseconds)
        let testSendMilliseconds = try reader.int("nh-test-send-wait-ms", default: 10000)
        guard (0...120_000).contains(testSendMilliseconds) else {
            throw ConfigError("nh-test-send-wait-ms must be 0...120000")
        }
        nhTestSendWait = .milliseconds(testSendMilliseconds)
        testMode = try reader.bool("test-mode")
        hubRateShare = try reader.int("hub-rate-share", default: 1)
        guard (1...1000).contains(hubRateShare) else { throw ConfigError("hub-rate-share must be 1...1000") }
        trustedProxies = try TrustedProxies(
            reader.string("trusted-proxies", default: ""),
            header: TrustedProxies.Header(setting: reader.string("trusted-proxy-header", default: "X-Forwarded-For")))
        let tlsCertificate = reader.string("http-tls-cert", default: "")
        let tlsKey = reader.string("http-tls-key", default: "")
        guard tlsCertificate.isEmpty == tlsKey.isEmpty else {
            throw ConfigError("http-tls-cert and http-tls-key go together")
        }
        httpTLS = tlsCertificate.isEmpty ? nil : (tlsCertificate, tlsKey)
        // A body crosses an RPC whole (a template, a rich content): more than a message holds would
        // only be read into memory to be refused by the service behind.
        let largest = RPCLimits.maxMessageBytes - 4096
        guard (1...largest).contains(maxBodyBytes), (1...largest).contains(maxContentBytes) else {
            throw ConfigError("max-body-bytes and max-content-bytes must be 1...\(largest) (the RPC message limit)")
        }
        let imagePath = reader.string("rich-image", default: "")
        if imagePath.isEmpty {
            richImage = DefaultRichImage.bytes
            richImageType = DefaultRichImage.contentType
        } else {
            guard let data = FileManager.default.contents(atPath: imagePath) else {
                throw ConfigError("rich-image \(imagePath) cannot be read")
            }
            guard data.count <= maxContentBytes else {
                throw ConfigError("rich-image is larger than max-content-bytes")
            }
            let types = [
                "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
            ]
            guard let type = types[URL(fileURLWithPath: imagePath).pathExtension.lowercased()] else {
                throw ConfigError("rich-image must end in .png, .jpg, .jpeg, .gif or .webp")
            }
            richImage = [UInt8](data)
            richImageType = type
        }
    }
}
