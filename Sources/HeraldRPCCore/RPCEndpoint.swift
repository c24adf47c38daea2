import Foundation
import HeraldModel

/// Where a service listens or a client connects: a Unix socket on this machine, or TCP (always
/// with TLS) between machines.
public enum RPCEndpoint: Sendable, Hashable, CustomStringConvertible {
    case unix(String)
    case tcp(host: String, port: Int)

    /// The socket file of a Unix endpoint, which its server makes 0660 and removes on exit.
    public var unixPath: String? {
        if case .unix(let path) = self { return path }
        return nil
    }

    public var description: String {
        switch self {
        case .unix(let path): "unix:\(path)"
        case .tcp(let host, let port): "\(host):\(port)"
        }
    }

    /// Whether `host` is an IP address literal (IPv4 or IPv6) rather than a name: names are sent
    /// as TLS SNI and resolved; literals are neither.
    package static func isIPLiteral(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

    /// Parses `host:port` (`[v6]:port` for IPv6).
    public static func tcp(_ text: String, key: String) throws -> RPCEndpoint {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else { throw ConfigError("\(key) must be host:port, e.g. 10.0.0.5:7001") }
        let host = String(text[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        guard !host.isEmpty else { throw ConfigError("\(key) must be host:port, e.g. 10.0.0.5:7001") }
        return .tcp(host: host, port: port)
    }
}
