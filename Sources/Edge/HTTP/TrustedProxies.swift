public import HTTPTypes
import HeraldModel

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The proxies whose forwarding header the edge believes: the `trusted-proxies` and
/// `trusted-proxy-header` settings.
///
/// Behind an ingress or a load balancer every connection comes from the proxy, so a bound per
/// address (login admission, the forged-SAS throttle) would put every client in one bucket and
/// the logs would name the proxy. When the peer is a trusted proxy, the client is the right-most
/// hop of the one header the proxies write (``Header``: `X-Forwarded-For` by default, or RFC
/// 7239's `Forwarded` `for=`) that is not a trusted proxy: each trusted proxy appends the address
/// it saw, so hops to the right of the client's are written by proxies this edge trusts, and
/// whatever a client writes itself stays to the left, unread. The other header is never read: a
/// proxy that appends to `X-Forwarded-For` passes a client's own `Forwarded` through untouched,
/// so reading it would let the client name itself. A peer that is not trusted is the client,
/// whatever it sends. None trusted (the default) reads no header.
public struct TrustedProxies: Sendable, Equatable {
    /// A network: its address (4 bytes, or 16 for IPv6) and prefix length.
    struct Network: Sendable, Equatable {
        var address: [UInt8]
        var prefix: Int

        func contains(_ other: [UInt8]) -> Bool {
            guard other.count == address.count else { return false }
            var bits = prefix
            for (a, b) in zip(address, other) {
                guard bits > 0 else { return true }
                let mask: UInt8 = bits >= 8 ? 0xFF : ~(0xFF >> UInt8(truncatingIfNeeded: bits))
                if a & mask != b & mask { return false }
                bits -= 8
            }
            return true
        }
    }

    /// The header the trusted proxies write (`trusted-proxy-header`).
    public enum Header: String, Sendable, Equatable, CaseIterable {
        case xForwardedFor = "x-forwarded-for"
        case forwarded

        /// `setting`, in any case: `X-Forwarded-For` or `Forwarded`.
        public init(setting: String) throws {
            guard let header = Header(rawValue: setting.lowercased()) else {
                throw ConfigError(
                    "trusted-proxy-header must be X-Forwarded-For or Forwarded, not \(setting.prefix(64))")
            }
            self = header
        }
    }

    let networks: [Network]
    /// The only header read (the other is ignored).
    public let header: Header
    /// At most this many hops are read, from the right: a chain of proxies is a handful.
    static let maxHops = 32

    public static let none = TrustedProxies(networks: [])

    init(networks: [Network], header: Header = .xForwardedFor) {
        self.networks = networks
        self.header = header
    }

    /// `setting`: CIDRs or single addresses, separated by commas or spaces, e.g.
    /// `10.0.0.0/8, 192.168.0.0/16, fd00::/8`; `header`: the one they write.
    public init(_ setting: String, header: Header = .xForwardedFor) throws {
        self.header = header
        var networks: [Network] = []
        for item in setting.split(whereSeparator: { $0 == "," || $0 == " " || $0 == "\t" || $0 == "\n" }) {
            let parts = item.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            guard let address = Self.address(parts[0]) else {
                throw ConfigError("trusted-proxies: \(item.prefix(64)) is not an IP address or CIDR")
            }
            var prefix = address.count * 8
            if parts.count == 2 {
                // trap-ok: a String parse, nil when out of range.
                guard let bits = Int(parts[1]), (0...prefix).contains(bits) else {
                    throw ConfigError("trusted-proxies: \(item.prefix(64)) has a prefix length out of range")
                }
                prefix = bits
            }
            networks.append(Network(address: address, prefix: prefix))
        }
        self.networks = networks
    }

    public var isEmpty: Bool { networks.isEmpty }

    func trusts(_ address: [UInt8]) -> Bool { networks.contains { $0.contains(address) } }

    /// The client's address for a request that came from `peer` with `headers`.
    public func client(peer: String, headers: HTTPFields) -> String {
        guard !networks.isEmpty, let peerAddress = Self.address(Substring(peer)), trusts(peerAddress) else {
            return peer
        }
        let hops =
            switch header {
            case .xForwardedFor: Self.forwardedFor(headers[values: .xForwardedFor])
            case .forwarded: Self.forwardedFor(forwarded: headers[values: .forwarded])
            }
        var client = peer
        for hop in hops.reversed().prefix(Self.maxHops) {
            // Not an address (`unknown`, an obfuscated name, garbage): the last proxy that wrote
            // a hop saw this one arrive from it; it is the best this edge knows.
            guard let address = Self.address(hop) else { return client }
            client = String(hop)
            if !trusts(address) { return client }
        }
        return client
    }

    /// The hops of `X-Forwarded-For` values, left to right.
    static func forwardedFor(_ values: [String]) -> [Substring] {
        values.flatMap { $0.split(separator: ",") }.map { $0.trimmingSpaces }
    }

    /// The `for=` hops of `Forwarded` values, left to right: `for=192.0.2.43`,
    /// `for="[2001:db8:cafe::17]:4711"`, `for="192.0.2.43:80"`.
    static func forwardedFor(forwarded values: [String]) -> [Substring] {
        var hops: [Substring] = []
        for element in values.flatMap({ $0.split(separator: ",") }) {
            var hop: Substring = "unknown"
            for pair in element.split(separator: ";") {
                let pair = pair.trimmingSpaces
                guard pair.count > 4, pair.prefix(4).lowercased() == "for=" else { continue }
                var value = pair.dropFirst(4)
                if value.first == "\"", value.last == "\"", value.count >= 2 { value = value.dropFirst().dropLast() }
                if value.first == "[" {
                    // [IPv6] or [IPv6]:port
                    guard let close = value.firstIndex(of: "]") else { break }
                    hop = value[value.index(after: value.startIndex)..<close]
                } else if let colon = value.firstIndex(of: ":"), value.lastIndex(of: ":") == colon {
                    hop = value[..<colon]  // IPv4:port
                } else {
                    hop = value
                }
                break
            }
            hops.append(hop)
        }
        return hops
    }

    /// `text` as 4 (IPv4, or IPv4-mapped IPv6) or 16 bytes; nil when it is not an address.
    static func address(_ text: Substring) -> [UInt8]? {
        guard !text.isEmpty, text.utf8.count <= 45 else { return nil }
        let string = String(text)
        var v4 = in_addr()
        if inet_pton(AF_INET, string, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, string, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes.prefix(10).allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF { return Array(bytes[12...]) }
        return bytes
    }
}
