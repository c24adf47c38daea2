import Foundation
import HeraldModel
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// How an ``RPCClient`` finds a service's replicas by name instead of a list: `dns:///name:port`
/// in a `<peer>-address` setting. A Kubernetes headless Service answers one address per ready pod,
/// so a caller spreads its calls over the pods without listing them, and follows them as they come
/// and go.
public struct RPCDiscovery: Sendable, CustomStringConvertible {
    public var name: String
    public var port: Int
    /// How often the name is looked up again.
    public var refresh: Duration
    /// The endpoints `name` has now, sorted; nil when the look-up failed.
    let resolve: @Sendable (_ name: String, _ port: Int) async -> [RPCEndpoint]?

    /// Any look-up (tests give one whose answers they change).
    public init(
        name: String, port: Int, refresh: Duration,
        resolve: @escaping @Sendable (_ name: String, _ port: Int) async -> [RPCEndpoint]?
    ) {
        self.name = name
        self.port = port
        self.refresh = refresh
        self.resolve = resolve
    }

    /// The system resolver's addresses of `name` (getaddrinfo: /etc/hosts, then DNS), TCP.
    public static func dns(name: String, port: Int, refresh: Duration) -> RPCDiscovery {
        RPCDiscovery(name: name, port: port, refresh: refresh) { name, port in await lookUp(name, port: port) }
    }

    public var description: String { "dns:///\(name):\(port)" }

    /// `dns:///name:port` as (name, port); nil when `text` does not start with `dns:`.
    public static func parse(_ text: String, key: String) throws -> (name: String, port: Int)? {
        guard text.hasPrefix("dns:") else { return nil }
        guard text.hasPrefix("dns:///") else {
            throw ConfigError(
                "\(key): a name is looked up as dns:///name:port (the system resolver; no DNS server in the URL)")
        }
        let endpoint = try RPCEndpoint.tcp(String(text.dropFirst("dns:///".count)), key: key)
        guard case .tcp(let name, let port) = endpoint, !RPCEndpoint.isIPLiteral(name), port > 0 else {
            throw ConfigError(
                "\(key) must be dns:///name:port with a host name and a port, e.g. dns:///herald-registration:7001")
        }
        return (name, port)
    }

    /// getaddrinfo on NIO's thread pool: a look-up can block for seconds when a DNS server is slow,
    /// which must not hold a thread of Swift's cooperative pool. Distinct addresses, sorted.
    static func lookUp(_ name: String, port: Int) async -> [RPCEndpoint]? {
        try? await NIOThreadPool.singleton.runIfActive {
            var hints = addrinfo()
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            hints.ai_family = AF_UNSPEC
            var result: UnsafeMutablePointer<addrinfo>?
            guard getaddrinfo(name, nil, &hints, &result) == 0, let first = result else { throw LookUpFailed() }
            defer { freeaddrinfo(first) }
            var hosts = Set<String>()
            var next: UnsafeMutablePointer<addrinfo>? = first
            while let info = next {
                var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
                if getnameinfo(
                    info.pointee.ai_addr, info.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0,
                    NI_NUMERICHOST) == 0
                {
                    hosts.insert(String(cString: buffer))
                }
                next = info.pointee.ai_next
            }
            return hosts.sorted().map { RPCEndpoint.tcp(host: $0, port: port) }
        }
    }

    private struct LookUpFailed: Error {}
}
