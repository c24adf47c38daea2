import HeraldModel
import HeraldTestSupport
import Testing

@testable import HeraldRPC

/// Where a service listens or a client connects between machines, and the TLS files that go with
/// it: parsed from settings, with a clear error before anything starts.
@Suite("endpoint settings", .watchedForStalls)
struct EndpointSettingsTests {
    @Test(
        "host:port, [v6]:port and a bare v6 literal with its port; a missing host or port, or one out of range, is refused"
    )
    func tcp() throws {
        #expect(try RPCEndpoint.tcp("10.0.0.5:7001", key: "k") == .tcp(host: "10.0.0.5", port: 7001))
        #expect(try RPCEndpoint.tcp("[::1]:7001", key: "k") == .tcp(host: "::1", port: 7001))
        #expect(try RPCEndpoint.tcp("fe80::1:7001", key: "k") == .tcp(host: "fe80::1", port: 7001))
        #expect(try RPCEndpoint.tcp("auth.internal:0", key: "k") == .tcp(host: "auth.internal", port: 0))
        for bad in ["", ":7001", "host", "host:", "host:65536", "host:-1", "host:http", "[]:7001", "host:7001 "] {
            let error = #expect(throws: ConfigError.self, "\(bad)") { try RPCEndpoint.tcp(bad, key: "auth-address") }
            #expect(error?.description.hasPrefix("auth-address must be host:port") == true)
        }
        #expect(RPCEndpoint.tcp(host: "::1", port: 1).description == "::1:1")
        #expect(RPCEndpoint.unix("/run/a.sock").description == "unix:/run/a.sock")
        #expect(RPCEndpoint.unix("/run/a.sock").unixPath == "/run/a.sock")
        #expect(RPCEndpoint.tcp(host: "h", port: 1).unixPath == nil)
    }

    @Test("IP literals are told from names: names go out as TLS SNI, literals do not")
    func literals() {
        for literal in ["10.0.0.5", "127.0.0.1", "::1", "fe80::1", "2001:db8::8a2e:370:7334", "::ffff:10.0.0.1"] {
            #expect(RPCEndpoint.isIPLiteral(literal), "\(literal)")
        }
        for name in ["localhost", "auth.internal", "10.0.0", "10.0.0.256", "[::1]", "", "1e3"] {
            #expect(!RPCEndpoint.isIPLiteral(name), "\(name)")
        }
    }

    @Test("TLS files: the certificate and key go together; requiring client certificates needs the CA they chain to")
    func files() throws {
        let none = try TLSFiles(reader: ConfigReader(arguments: []))
        #expect(!none.hasIdentity && none.ca.isEmpty && !none.requireClientCertificate)
        let mutual = try TLSFiles(
            reader: ConfigReader(arguments: [
                "--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--tls-ca", "/ca.pem", "--tls-require-client-cert",
            ]))
        #expect(mutual.hasIdentity && mutual.requireClientCertificate && mutual.ca == "/ca.pem")
        for arguments in [
            ["--tls-cert", "/c.pem"], ["--tls-key", "/k.pem"], ["--tls-require-client-cert"],
            ["--tls-require-client-cert", "maybe", "--tls-ca", "/ca.pem"],
        ] {
            #expect(throws: ConfigError.self, "\(arguments)") {
                try TLSFiles(reader: ConfigReader(arguments: arguments))
            }
        }
        // Listening on TCP without an identity is refused before any file is read.
        #expect(throws: ConfigError.self) { try none.serverContext() }
        #expect(throws: ConfigError.self) { try none.grpcServerSecurity() }
        #expect(TLSFiles.keys == ["tls-cert", "tls-key", "tls-ca", "tls-require-client-cert"])
    }
}
