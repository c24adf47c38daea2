public import HeraldRPC

/// Which flow `POST api/notifications` (no query) runs, as the tutorial's backend was configured.
public enum EdgeProfile: String, CaseIterable, Sendable {
    /// Secure push: store "Secure confirmation." and push only its id.
    case secure
    /// Rich push: store an image and push its id with a message.
    case rich
}

/// Settings of herald-edge, besides ``RuntimeConfig``'s.
///
/// - `http-host` (`HERALD_HTTP_HOST`, `127.0.0.1`): address to listen on.
/// - `http-port` (`HERALD_HTTP_PORT`, 8080): port; 0 picks a free one.
/// - `profile` (`HERALD_PROFILE`, `secure`): `secure` or `rich`.
/// - `max-body-bytes` (`HERALD_MAX_BODY_BYTES`, 65536): largest request body on `api/*` routes.
///
/// Once listening, the edge writes its base URL to `<runtime-dir>/edge.url`.
public struct EdgeConfig: Sendable {
    public static let keys: Set<String> = ["http-host", "http-port", "profile", "max-body-bytes"]
    public var host: String
    public var port: Int
    public var profile: EdgeProfile
    public var maxBodyBytes: Int

    public init(reader: ConfigReader) throws {
        host = reader.string("http-host", default: "127.0.0.1")
        port = try reader.int("http-port", default: 8080)
        profile = try reader.choice("profile", default: .secure)
        maxBodyBytes = try reader.int("max-body-bytes", default: 64 << 10)
        guard (0...65535).contains(port) else { throw ConfigError("http-port must be 0...65535") }
    }
}
