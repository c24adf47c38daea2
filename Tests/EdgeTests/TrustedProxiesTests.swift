import HTTPTypes
import HeraldModel
import HeraldTestSupport
import Testing

@testable import Edge

@Suite("trusted proxies", .watchedForStalls)
struct TrustedProxiesTests {
    static let proxies = (try? TrustedProxies("10.0.0.0/8, fd00::/8 192.168.1.1")) ?? .none
    /// The same proxies, writing RFC 7239's `Forwarded`.
    static let forwardedProxies =
        (try? TrustedProxies("10.0.0.0/8, fd00::/8 192.168.1.1", header: .forwarded)) ?? .none

    static func headers(_ fields: [(String, String)]) -> HTTPFields {
        var headers = HTTPFields()
        for (name, value) in fields {
            if let name = HTTPField.Name(name) { headers.append(HTTPField(name: name, value: value)) }
        }
        return headers
    }

    @Test("the client is the right-most hop that is not a trusted proxy; what a client writes to its left is not read")
    func rightMostUntrusted() {
        let xff = Self.headers([("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.1.2.3")])
        #expect(Self.proxies.client(peer: "10.0.0.1", headers: xff) == "203.0.113.7")
        // Two fields are one list, in order.
        let split = Self.headers([("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-For", "203.0.113.8, 192.168.1.1")])
        #expect(Self.proxies.client(peer: "10.0.0.1", headers: split) == "203.0.113.8")
        // IPv6 proxies, an IPv4-mapped peer.
        #expect(Self.proxies.client(peer: "fd00::5", headers: xff) == "203.0.113.7")
        #expect(Self.proxies.client(peer: "::ffff:10.0.0.9", headers: xff) == "203.0.113.7")
    }

    @Test("a peer that is not trusted, or no proxies set: the peer, whatever it sends")
    func untrustedPeer() {
        let xff = Self.headers([("X-Forwarded-For", "203.0.113.7"), ("Forwarded", "for=198.51.100.1")])
        #expect(Self.proxies.client(peer: "198.51.100.200", headers: xff) == "198.51.100.200")
        #expect(TrustedProxies.none.client(peer: "10.0.0.1", headers: xff) == "10.0.0.1")
        #expect(Self.proxies.client(peer: "", headers: xff) == "")
    }

    @Test("proxies that write Forwarded: its for= (quoted, bracketed IPv6, with ports); X-Forwarded-For unread")
    func forwarded() {
        let headers = Self.headers([
            (
                "Forwarded",
                #"for=192.0.2.43;proto=https, for="[2001:db8:cafe::17]:4711";by=10.0.0.1, for="10.0.0.2:80""#
            ),
            ("X-Forwarded-For", "198.51.100.1"),
        ])
        #expect(Self.forwardedProxies.client(peer: "10.0.0.1", headers: headers) == "2001:db8:cafe::17")
        let obfuscated = Self.headers([("Forwarded", "for=_hidden, for=10.0.0.3")])
        // Not an address: the last proxy that wrote a hop is the best the edge knows.
        #expect(Self.forwardedProxies.client(peer: "10.0.0.1", headers: obfuscated) == "10.0.0.3")
        // The client's own X-Forwarded-For, passed through by a Forwarded proxy: never read.
        let forged = Self.headers([("X-Forwarded-For", "198.51.100.77"), ("Forwarded", "for=203.0.113.9")])
        #expect(Self.forwardedProxies.client(peer: "10.0.0.1", headers: forged) == "203.0.113.9")
        let onlyForged = Self.headers([("X-Forwarded-For", "198.51.100.77")])
        #expect(Self.forwardedProxies.client(peer: "10.0.0.1", headers: onlyForged) == "10.0.0.1")
    }

    @Test("proxies that append X-Forwarded-For: a Forwarded the client wrote itself is never read")
    func forgedForwarded() {
        // ingress-nginx appends the address it saw to X-Forwarded-For and passes Forwarded through.
        let forged = Self.headers([("Forwarded", "for=198.51.100.77"), ("X-Forwarded-For", "203.0.113.7")])
        #expect(Self.proxies.client(peer: "10.0.0.1", headers: forged) == "203.0.113.7")
        let onlyForged = Self.headers([("Forwarded", "for=198.51.100.77")])
        #expect(Self.proxies.client(peer: "10.0.0.1", headers: onlyForged) == "10.0.0.1")
    }

    @Test("garbage, empty or endless chains never go left of what the trusted proxies wrote")
    func hostileChains() {
        for value in ["", "not-an-ip", " , ,", "unknown, 10.0.0.4", String(repeating: "10.0.0.1,", count: 5000)] {
            let answer = Self.proxies.client(peer: "10.0.0.1", headers: Self.headers([("X-Forwarded-For", value)]))
            #expect(answer.hasPrefix("10."), "\(value.prefix(40)): \(answer)")
        }
        // Every hop trusted: the left-most one read.
        let all = Self.headers([("X-Forwarded-For", "10.0.0.7, 10.0.0.8")])
        #expect(Self.proxies.client(peer: "10.0.0.1", headers: all) == "10.0.0.7")
    }

    @Test("the setting: CIDRs and addresses; a bad one is a configuration error")
    func setting() throws {
        #expect(try TrustedProxies("").isEmpty)
        #expect(try TrustedProxies("127.0.0.1/32,::1").networks.count == 2)
        for bad in ["10.0.0.0/33", "fd00::/129", "10.0.0.0/-1", "proxy.example", "10.0.0.0/8/8", "/8"] {
            #expect(throws: ConfigError.self, "\(bad)") { try TrustedProxies(bad) }
        }
        let config = try EdgeConfig(reader: ConfigReader(arguments: ["--trusted-proxies", "10.0.0.0/8"]))
        #expect(config.trustedProxies == (try TrustedProxies("10.0.0.0/8")))
        #expect(config.trustedProxies.header == .xForwardedFor)
        for setting in ["Forwarded", "forwarded", "FORWARDED"] {
            let forwarded = try EdgeConfig(
                reader: ConfigReader(arguments: [
                    "--trusted-proxies", "10.0.0.0/8", "--trusted-proxy-header", setting,
                ]))
            #expect(forwarded.trustedProxies.header == .forwarded)
        }
        #expect(throws: ConfigError.self) {
            try EdgeConfig(reader: ConfigReader(arguments: ["--trusted-proxy-header", "X-Real-IP"]))
        }
    }
}
